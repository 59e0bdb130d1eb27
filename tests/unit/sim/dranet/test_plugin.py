"""DRANET's plugin over the DRA gRPC protocol, called by the simulated kubelet's own client code
(registration watcher and ``draplugin``), and its runtime hooks over the pod config store."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compute_domains.infra import kube
from compute_domains.sim import topology
from compute_domains.sim.dranet import inventory, nri, plugin, podconfig
from compute_domains.sim.kubelet import claimcache, draplugin, errors, registration
from compute_domains.sim.kubelet import nri as kubelet_nri

NODE = "gb200-r0-n00"
SHAPE = topology.Shape(racks=1, nodes_per_rack=1, gpus_per_node=4)


def _nics() -> list[inventory.Nic]:
    spec = next(s for s in topology.nodes(SHAPE) if s.name == NODE)
    return inventory.nics(spec)


def _claim(
    uid: str, devices: list[str], *, pods: tuple[str, ...] = ("pod-1",), **extra: Any
) -> dict[str, Any]:
    results = [
        {"request": "rdma-nics", "driver": "dra.net", "pool": NODE, "device": d} for d in devices
    ]
    results.append({"request": "gpu", "driver": "gpu.example.com", "pool": NODE, "device": "g0"})
    return {
        "metadata": {"name": "rank-0-rdma", "namespace": "ns", "uid": uid},
        "status": {
            "allocation": {"devices": {"results": results, **extra}},
            "reservedFor": [{"resource": "pods", "name": p, "uid": p} for p in pods],
        },
    }


class _Claims:
    """The claims the API would return (the plugin reads claims through a getter)."""

    def __init__(self) -> None:
        self.by_name: dict[str, dict[str, Any]] = {}

    async def __call__(self, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.by_name:
            raise kube.NotFound(f'resourceclaims.resource.k8s.io "{name}" not found')
        return self.by_name[name]


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A node root short enough for unix socket paths (108 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="dn-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def served(short_root: Path) -> Any:
    """DRANET's plugin on a node root, registered by the kubelet's registry."""
    tmp_path = short_root
    claims = _Claims()
    store = podconfig.PodConfigStore(tmp_path)
    server = plugin.PluginServer(tmp_path, plugin.Prepare(claims, NODE, _nics(), store))
    await server.start()
    reg = registration.PluginRegistry(tmp_path, logging.LoggerAdapter(logging.getLogger("t")))
    await reg.reconcile()
    yield reg, claims, store
    await reg.close()
    await server.stop()


def _entry(uid: str) -> claimcache.ClaimInfo:
    return claimcache.ClaimInfo(
        uid=uid,
        name="rank-0-rdma",
        namespace="ns",
        pod_uids={"pod-1"},
        drivers=["dra.net"],
        devices={},
    )


async def test_the_kubelet_registers_dranet_and_prepares_a_claim_without_cdi_devices(
    served: Any, short_root: Path
) -> None:
    tmp_path = short_root
    reg, claims, store = served
    plug = reg.get("dra.net")
    assert plug.version == "v1"
    assert plug.endpoint == tmp_path / "var/lib/kubelet/plugins/dra.net/dra.sock"
    rdma = [n.device_name for n in _nics() if n.rdma_link]
    claims.by_name["rank-0-rdma"] = _claim("u1", rdma)
    devices = await draplugin.prepare(plug, [_entry("u1")], 5.0)
    assert devices == {"u1": []}  # DRANET gives devices through NRI, not CDI
    got = store.pod("pod-1")
    assert [c.if_name for c in got] == ["gpu0rdma0", "gpu1rdma0", "gpu2rdma0", "gpu3rdma0"]
    assert got[0].char_devices == (
        ("/dev/infiniband/rdma_cm", 10, 58),
        ("/dev/infiniband/uverbs0", 231, 192),
    )
    assert got[0].addresses == ("10.0.0.2/32",) and got[0].claim == "ns/rank-0-rdma"
    await draplugin.unprepare(plug, [_entry("u1")], 5.0)
    assert store.pod("pod-1") == []


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        (None, "retrieve claim ns/rank-0-rdma: "),
        (_claim("other", []), "claim ns/rank-0-rdma got replaced"),
        (
            _claim("u1", ["pci-0000-99-00-0"]),
            "claim u1 contain errors: failed to get network interface name for device "
            "pci-0000-99-00-0: device pci-0000-99-00-0 not found in store",
        ),
        (
            _claim(
                "u1",
                ["pci-0000-03-00-0"],
                config=[{"opaque": {"driver": "dra.net", "parameters": {"interface": {}}}}],
            ),
            "claim u1 contain errors: opaque dra.net configuration is not applied",
        ),
    ],
)
async def test_a_claim_dranet_cannot_prepare_fails_with_its_reason(
    served: Any, claim: dict[str, Any] | None, message: str
) -> None:
    reg, claims, store = served
    if claim is not None:
        claims.by_name["rank-0-rdma"] = claim
    with pytest.raises(errors.PrepareError, match="NodePrepareResources failed") as info:
        await draplugin.prepare(reg.get("dra.net"), [_entry("u1")], 5.0)
    assert message in str(info.value)
    assert store.pod("pod-1") == []


async def test_a_claim_reserved_for_no_pod_prepares_nothing(served: Any) -> None:
    reg, claims, store = served
    claims.by_name["rank-0-rdma"] = _claim("u1", ["pci-0000-03-00-0"], pods=())
    assert await draplugin.prepare(reg.get("dra.net"), [_entry("u1")], 5.0) == {"u1": []}
    assert store.pod("pod-1") == []


def _config(device: str, if_name: str, uverbs: int) -> podconfig.DeviceConfig:
    return podconfig.DeviceConfig(
        claim="ns/c",
        device=device,
        if_name=if_name,
        mac="42:01:0a:00:00:02",
        addresses=("10.0.0.2/32",),
        rdma_link=f"mlx5_{uverbs}",
        char_devices=(
            ("/dev/infiniband/rdma_cm", 10, 58),
            (f"/dev/infiniband/uverbs{uverbs}", 231, 192 + uverbs),
        ),
    )


def test_the_store_survives_a_restart_and_forgets_a_claim_in_every_pod(tmp_path: Path) -> None:
    store = podconfig.PodConfigStore(tmp_path)
    store.set("p1", _config("pci-a", "gpu0rdma0", 0))
    store.set("p2", _config("pci-a", "gpu0rdma0", 0))
    again = podconfig.PodConfigStore(tmp_path)
    assert again.pod("p1") == [_config("pci-a", "gpu0rdma0", 0)]
    again.delete_claim("ns/c")
    assert again.pod("p1") == again.pod("p2") == []
    assert podconfig.PodConfigStore(tmp_path).pod("p2") == []


async def test_the_hooks_move_the_nics_into_the_pod_give_char_devices_and_return_them(
    tmp_path: Path,
) -> None:
    store = podconfig.PodConfigStore(tmp_path)
    written: list[tuple[str, list[dict[str, Any]]]] = []

    async def write(claim: str, devices: list[dict[str, Any]]) -> None:
        written.append((claim, devices))

    hooks = nri.NriHooks(write, NODE, tmp_path, store)
    inventory.layout(tmp_path, _nics())
    store.set("p1", _config("pci-0000-03-00-0", "gpu0rdma0", 0))
    store.set("p1", _config("pci-0002-03-00-0", "gpu1rdma0", 1))
    netns = kubelet_nri.make_netns(tmp_path, "p1", "127.64.0.2")
    sandbox = kubelet_nri.Sandbox(
        uid="p1", namespace="ns", name="rank-0", ip="127.64.0.2", netns=netns
    )
    await hooks.run_pod_sandbox(sandbox)
    await hooks.run_pod_sandbox(sandbox)  # a retried start: idempotent
    await hooks.close()
    assert sorted(p.name for p in netns.iterdir()) == ["eth0", "gpu0rdma0", "gpu1rdma0", "lo"]
    host = sorted(p.name for p in (tmp_path / "sys/class/net").iterdir())
    assert host == ["eth1", "gpu2rdma0", "gpu3rdma0"]
    claim, devices = written[0]
    assert claim == "ns/c" and [d["device"] for d in devices] == [
        "pci-0000-03-00-0",
        "pci-0002-03-00-0",
    ]
    adj = await hooks.create_container(sandbox, "trainer")
    assert [(d.path, d.major, d.minor) for d in adj.devices] == [
        ("/dev/infiniband/rdma_cm", 10, 58),
        ("/dev/infiniband/uverbs0", 231, 192),
        ("/dev/infiniband/uverbs1", 231, 193),
    ]
    assert adj.env == {} and adj.mounts == []
    await hooks.stop_pod_sandbox(sandbox)
    host = sorted(p.name for p in (tmp_path / "sys/class/net").iterdir())
    assert host == ["eth1", "gpu0rdma0", "gpu1rdma0", "gpu2rdma0", "gpu3rdma0"]


async def test_a_host_network_pod_is_refused_and_a_pod_without_claims_is_left_alone(
    tmp_path: Path,
) -> None:
    store = podconfig.PodConfigStore(tmp_path)

    async def write(claim: str, devices: list[dict[str, Any]]) -> None:
        raise AssertionError("no status without a move")

    hooks = nri.NriHooks(write, NODE, tmp_path, store)
    other = kubelet_nri.Sandbox(uid="p0", namespace="ns", name="plain", ip="127.64.0.3", netns=None)
    await hooks.run_pod_sandbox(other)
    assert (await hooks.create_container(other, "c")).devices == []
    store.set("p1", _config("pci-0000-03-00-0", "gpu0rdma0", 0))
    host = kubelet_nri.Sandbox(uid="p1", namespace="ns", name="hostnet", ip="127.1.0.1", netns=None)
    with pytest.raises(
        kubelet_nri.NriError,
        match="RunPodSandbox pod ns/hostnet using host network can not claim host devices",
    ):
        await hooks.run_pod_sandbox(host)
