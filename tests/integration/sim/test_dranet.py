"""DRANET's stand-in: the guide's ``rdma-devices`` DeviceClass (§3.4, verbatim in
``examples/guide/``) selects the ``dra.net`` NICs each GB200 node publishes, the scheduler
allocates four of them to a pod's claim (the guide's shared RDMA template of §15.5), the kubelet
prepares it through DRANET's plugin, and the container sees what DRANET gives: the NICs in its
network namespace (``/sys/class/net``), the RDMA character devices, no extra env; the claim's
device status carries the network data; the NICs return to the host when the pod goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient, codecs
from lightkube.resources.core_v1 import Event, Namespace, Pod, ServiceAccount
from lightkube.resources.resource_v1 import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceSlice,
)

from compute_domains.infra import kube
from compute_domains.sim import lifecycle, state, toolchain, topology
from compute_domains.sim.dranet import inventory
from tests.conftest import keep_sims
from tests.integration.helpers import wait_for, wait_gone

NODE = "gb200-r0-n00"
REPO = Path(__file__).resolve().parents[3]
DEVICE_CLASS = REPO / "examples/guide/k8s134-rdma-deviceclass.yaml"
RDMA_TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: training-job-rdma
spec:
  spec:
    devices:
      requests:
      - name: rdma-nics
        exactly:
          deviceClassName: rdma-devices
          count: 4
"""
"""The guide's shared RDMA template (§15.5), verbatim."""

_PROBE = r"""
ls /sys/class/net | sed 's/^/net: /'
for i in /sys/class/net/gpu*; do
  echo "nic: $(basename $i) $(cat $i/address) mtu=$(cat $i/mtu) rdma=$(ls $i/device/infiniband)"
done
for d in /dev/infiniband/*; do echo "dev: $d $(stat -c '%F %t:%T' $d)"; done
env | cut -d= -f1 | grep -i -E 'rdma|dranet|mlx|ibv|nccl|ucx' | sed 's/^/env: /'
echo done
exec sleep 3600
"""


@pytest.fixture(scope="module")
def dranet_sim(toolset: toolchain.Toolset, sim_home: Path) -> Iterator[state.SimPaths]:
    """One rack of two GB200 nodes with DRANET's stand-in (no compute-domains driver)."""
    paths = state.SimPaths(sim_home, "dranet")
    started = lifecycle.start(
        paths,
        toolset.bin_dir,
        die_with_parent=True,
        shape=topology.Shape(racks=1, nodes_per_rack=2, gpus_per_node=4),
        dranet=True,
    )
    yield paths
    lifecycle.stop(paths, process=started.process, remove=not keep_sims())


@pytest.fixture
async def api(dranet_sim: state.SimPaths) -> AsyncIterator[AsyncClient]:
    c = kube.client(kube.KubeSettings(kubeconfig=dranet_sim.kubeconfig, field_manager="tests"))
    yield c
    await c.close()


@pytest.fixture
async def rdma_ns(api: AsyncClient) -> AsyncIterator[str]:
    """A namespace with the guide's DeviceClass and RDMA template applied."""
    name = f"rdma-{uuid.uuid4().hex[:6]}"
    await api.create(Namespace.from_dict({"metadata": {"name": name}}))
    await wait_for(api, ServiceAccount, "default", lambda _: True, namespace=name)
    dc = codecs.from_dict(yaml.safe_load(DEVICE_CLASS.read_text()))
    assert isinstance(dc, DeviceClass)
    await api.apply(dc, field_manager="tests", force=True)
    await api.create(ResourceClaimTemplate.from_dict(yaml.safe_load(RDMA_TEMPLATE)), namespace=name)
    yield name
    await api.delete(Namespace, name)


def _pod(name: str, ns: str, host_network: bool = False) -> Pod:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "nodeSelector": {"kubernetes.io/hostname": NODE},
        "containers": [
            {
                "name": "trainer",
                "image": "ubuntu:22.04",
                "command": ["sh", "-c", _PROBE],
                "resources": {"claims": [{"name": "rdma-nics"}]},
            }
        ],
        "resourceClaims": [{"name": "rdma-nics", "resourceClaimTemplateName": "training-job-rdma"}],
    }
    if host_network:
        spec["hostNetwork"] = True
    return Pod.from_dict({"metadata": {"name": name, "namespace": ns}, "spec": spec})


def _host_nics(sim: state.SimPaths) -> set[str]:
    return {p.name for p in (sim.root / "nodes" / NODE / "sys/class/net").iterdir()}


async def _dranet_slices(api: AsyncClient, nodes: int, timeout: float = 60.0) -> dict[str, Any]:
    """The ``dra.net`` slices by node once ``nodes`` nodes have one (a watch from the list):
    each node's DRANET publishes after the sim is up, as a DaemonSet's pod would, so a list
    taken right after ``sim up`` may not have them all yet (seen under CI's load)."""
    fields = {"spec.driver": "dra.net"}

    async def follow() -> dict[str, Any]:
        by_node: dict[str, Any] = {}
        async for s in api.list(ResourceSlice, fields=fields):
            by_node[s.spec.nodeName] = s
        if len(by_node) >= nodes:
            return by_node
        # With no resourceVersion the watch starts with the current slices: nothing is missed.
        async with contextlib.aclosing(api.watch(ResourceSlice, fields=fields)) as events:
            async for op, s in events:
                if op == "DELETED":
                    by_node.pop(s.spec.nodeName, None)
                else:
                    by_node[s.spec.nodeName] = s
                if len(by_node) >= nodes:
                    return by_node
        return by_node

    return await asyncio.wait_for(follow(), timeout)


async def test_each_gb200_node_publishes_its_nics_as_dranet_does(api: AsyncClient) -> None:
    by_node = await _dranet_slices(api, 2)
    assert sorted(by_node) == ["gb200-r0-n00", "gb200-r0-n01"]  # not the control-plane node
    spec = by_node[NODE].to_dict()["spec"]
    assert spec["pool"] == {"name": NODE, "generation": 0, "resourceSliceCount": 1}
    names = [d["name"] for d in spec["devices"]]
    assert names == [
        "pci-0000-00-05-0",
        "pci-0000-03-00-0",
        "pci-0002-03-00-0",
        "pci-0010-03-00-0",
        "pci-0012-03-00-0",
    ]
    rdma = {
        d["attributes"]["dra.net/ifName"]["string"]: d["attributes"]["dra.net/pciAddress"]["string"]
        for d in spec["devices"]
        if d["attributes"]["dra.net/rdma"]["bool"]
    }
    assert rdma == {
        "gpu0rdma0": "0000:03:00.0",
        "gpu1rdma0": "0002:03:00.0",
        "gpu2rdma0": "0010:03:00.0",
        "gpu3rdma0": "0012:03:00.0",
    }
    meta = by_node[NODE].metadata
    assert meta is not None and meta.name and meta.name.startswith(f"{NODE}-dra.net-")
    assert meta.ownerReferences and meta.ownerReferences[0].kind == "Node"


async def test_a_pod_with_the_guides_rdma_claim_gets_the_four_nics(
    api: AsyncClient, rdma_ns: str, dranet_sim: state.SimPaths
) -> None:
    pod = _pod("rank-0", rdma_ns)
    await api.create(pod)
    # The pod keeps running: a finished pod's generated claim is deleted by its controller.
    running = await wait_for(
        api,
        Pod,
        "rank-0",
        lambda p: bool(p.status and p.status.phase in ("Running", "Succeeded", "Failed")),
        namespace=rdma_ns,
        timeout=90,
    )
    assert running.status is not None and running.status.phase == "Running"
    lines: list[str] = []
    async with asyncio.timeout(30):
        async for line in api.log("rank-0", namespace=rdma_ns, follow=True):
            lines.append(line.rstrip("\n"))
            if lines[-1] == "done":
                break
    assert sorted(x for x in lines if x.startswith("net: ")) == [
        "net: eth0",
        "net: gpu0rdma0",
        "net: gpu1rdma0",
        "net: gpu2rdma0",
        "net: gpu3rdma0",
        "net: lo",
    ]
    nics = [x for x in lines if x.startswith("nic: ")]
    assert nics[0] == "nic: gpu0rdma0 42:01:0a:00:00:02 mtu=8896 rdma=mlx5_0", nics
    assert len(nics) == 4
    devs = sorted(x for x in lines if x.startswith("dev: "))
    assert devs == [
        "dev: /dev/infiniband/rdma_cm character special file a:3a",
        "dev: /dev/infiniband/uverbs0 character special file e7:c0",
        "dev: /dev/infiniband/uverbs1 character special file e7:c1",
        "dev: /dev/infiniband/uverbs2 character special file e7:c2",
        "dev: /dev/infiniband/uverbs3 character special file e7:c3",
    ]
    assert not [x for x in lines if x.startswith("env: ")]  # DRANET sets no env

    claim_name = running.status.resourceClaimStatuses[0].resourceClaimName  # type: ignore[index]
    claim = await api.get(ResourceClaim, str(claim_name), namespace=rdma_ns)
    status = claim.to_dict()["status"]
    allocated = {r["device"] for r in status["allocation"]["devices"]["results"]}
    assert allocated == {n.device_name for n in inventory.nics(_spec(NODE)) if n.rdma_link}
    await wait_for(
        api,
        ResourceClaim,
        str(claim_name),
        lambda c: len(c.to_dict()["status"].get("devices") or []) == 4,
        namespace=rdma_ns,
        timeout=30,
    )
    claim = await api.get(ResourceClaim, str(claim_name), namespace=rdma_ns)
    device_status = {d["device"]: d for d in claim.to_dict()["status"]["devices"]}
    first = device_status["pci-0000-03-00-0"]
    assert first["networkData"] == {
        "interfaceName": "gpu0rdma0",
        "hardwareAddress": "42:01:0a:00:00:02",
        "ips": ["10.0.0.2/32"],
    }
    assert {c["type"]: c["reason"] for c in first["conditions"]} == {
        "Ready": "NetworkDeviceReady",
        "NetworkReady": "NetworkReady",
    }

    # While the pod exists the NICs are in its namespace, not the host's; then they return.
    assert _host_nics(dranet_sim) == {"eth1"}
    await api.delete(Pod, "rank-0", namespace=rdma_ns)
    await wait_gone(api, Pod, "rank-0", rdma_ns)
    assert _host_nics(dranet_sim) == {"eth1", "gpu0rdma0", "gpu1rdma0", "gpu2rdma0", "gpu3rdma0"}


async def test_a_host_network_pod_cannot_take_the_nics(api: AsyncClient, rdma_ns: str) -> None:
    """DRANET refuses to move NICs into the host's namespace; the kubelet reports it."""
    await api.create(_pod("hostnet", rdma_ns, host_network=True))

    want = "using host network can not claim host devices"
    async with asyncio.timeout(60):
        async for _op, ev in api.watch(Event, namespace=rdma_ns):
            if ev.reason == "FailedCreatePodSandBox" and want in (ev.message or ""):
                assert "RunPodSandbox pod " + rdma_ns + "/hostnet" in (ev.message or "")
                break
    pod = await api.get(Pod, "hostnet", namespace=rdma_ns)
    assert pod.status is not None and pod.status.phase == "Pending"


def _spec(name: str) -> topology.NodeSpec:
    shape = topology.Shape(racks=1, nodes_per_rack=2, gpus_per_node=4)
    return next(s for s in topology.all_nodes(shape) if s.name == name)
