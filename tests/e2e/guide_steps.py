"""Steps the deployment guide (shared/seeds/002_*) runs with kubectl, for the ``test_guide_*``
modules: each reads its manifests from ``examples/guide/`` and applies them as they are.

``reaches_peers`` reads what the guide's program would depend on from the workload stand-in's
log (``sim.workload``): the IMEX channel, and the local IMEX daemon's view of the domain,
``UP, <ready>/<configured> configured nodes READY``; ``transport`` reads which peers it says NCCL
reaches over MNNVL and which fall back to RDMA (its ``transport:`` line).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.sim import state
from tests.e2e import helpers

GUIDE = Path(__file__).resolve().parents[2] / "examples" / "guide"
_TRANSPORT = re.compile(r"mnnvl-workload: transport: (.*)")
FOUR_NICS = "RDMA over 4 NICs (gpu0rdma0, gpu1rdma0, gpu2rdma0, gpu3rdma0)"
"""How the workload names the fallback with DRANET's four NICs in its container."""
_DOMAIN = re.compile(r"IMEX domain(?: changed)?: (\S+), (\d+)/(\d+) configured nodes READY")


def apply(sim: state.SimPaths, *files: str) -> None:
    """``kubectl apply -f yamls/<file>`` as the guide writes it, from ``examples/guide/``."""
    for name in files:
        helpers.kubectl(sim, "apply", "-f", str(GUIDE / name))


def delete(sim: state.SimPaths, *files: str) -> None:
    for name in files:
        helpers.kubectl(sim, "delete", "-f", str(GUIDE / name), "--wait=false")


def label(sim: state.SimPaths, nodes: dict[str, str]) -> None:
    """§2.4: ``kubectl label node <worker> topology=<value>`` (the sim's nodes for the guide's)."""
    for node, value in nodes.items():
        helpers.kubectl(sim, "label", "node", node, f"topology={value}", "--overwrite")


async def cluster_uuid(admin: AsyncClient, node: str) -> str:
    """The node's ``nvidia.com/gpu.clusteruuid`` (§3.1: same domain, same ClusterUUID)."""
    obj = await admin.get(Node, node)
    assert obj.metadata is not None and obj.metadata.labels is not None
    return str(obj.metadata.labels["nvidia.com/gpu.clusteruuid"])


async def running(admin: AsyncClient, pods: tuple[str, ...], seconds: float = 240) -> None:
    for pod in pods:
        await helpers.within(
            seconds, functools.partial(helpers.pod_ready, admin, pod), f"{pod} Running and Ready"
        )


DRANET_DEVICES = ("gpu0rdma0", "gpu3rdma0", "uverbs0", "uverbs3", "rdma_cm")
"""What DRANET gives a path-A container (the dranet test's probe, through the guide's exec)."""


def assert_dranet_nics(sim: state.SimPaths, pods: tuple[str, ...]) -> None:
    """Path A: each pod's container holds DRANET's RDMA interfaces and devices."""
    for pod in pods:
        seen = helpers.kubectl(sim, "exec", pod, "--", "ls", "/sys/class/net", "/dev/infiniband")
        for dev in DRANET_DEVICES:
            assert dev in seen, seen


async def assert_host_network(admin: AsyncClient, pods: tuple[str, ...]) -> None:
    """Path B: each pod runs in the host's network (its IP is the host's)."""
    for pod in pods:
        obj = await admin.get(Pod, pod, namespace="default")
        assert obj.status is not None and obj.status.podIP == obj.status.hostIP, obj.status


async def node_of(admin: AsyncClient, pod: str) -> str:
    obj = await admin.get(Pod, pod, namespace="default")
    assert obj.spec is not None and obj.spec.nodeName
    return obj.spec.nodeName


async def cd_ready(admin: AsyncClient, cd: str, nodes: int) -> bool:
    st = await helpers.cd_status(admin, cd)
    listed = st.get("nodes") or []
    return (
        st.get("status") == "Ready"
        and len(listed) == nodes
        and all(n.get("status") == "Ready" for n in listed)
    )


async def imex_views(admin: AsyncClient, pod: str) -> list[tuple[str, int, int]]:
    """Every IMEX domain view the pod's program logged so far: (state, READY, configured)."""
    log = await helpers.log_of(admin, pod)
    return [(st, int(r), int(c)) for st, r, c in _DOMAIN.findall(log)]


async def reaches_peers(admin: AsyncClient, pod: str, peers: int, channel: int = 0) -> str:
    """The pod's program holds channel ``channel`` and its local IMEX daemon reports ``peers`` + 1
    of the domain's nodes READY: its peers are reachable over IMEX (the condition MNNVL needs).

    A domain of fewer nodes than the 18 names of its ``nodes.cfg`` reports DEGRADED, as the real
    service does with unreachable listed nodes (``test_two_racks``); the count is what says which
    peers are reachable. Returns the pod's log."""

    async def seen() -> tuple[str, int, int] | None:
        views = await imex_views(admin, pod)
        return views[-1] if views and views[-1][1] == peers + 1 else None

    await helpers.within(240, seen, f"{pod}'s IMEX domain with {peers + 1} READY nodes", 1.0)
    log = await helpers.log_of(admin, pod)
    assert f"/dev/nvidia-caps-imex-channels/channel{channel} " in log, log
    assert "IMEX channels: 1:" in log, log
    return log


async def transport(
    admin: AsyncClient, pod: str, ok: Callable[[str], bool], what: str, seconds: float = 240
) -> str:
    """The pod's program's latest ``transport:`` line once ``ok`` holds for it (its program
    repeats the line on every IMEX domain change); fails naming the line it last saw."""
    seen = "(no transport line yet)"

    async def said() -> bool:
        nonlocal seen
        lines = _TRANSPORT.findall(await helpers.log_of(admin, pod))
        seen = lines[-1] if lines else seen
        return bool(lines) and ok(lines[-1])

    try:
        await helpers.within(seconds, said, f"{pod}: {what}", 1.0)
    except AssertionError as err:
        raise AssertionError(f"{pod}: {what} not within {seconds:.0f}s; it said: {seen}") from err
    return seen
