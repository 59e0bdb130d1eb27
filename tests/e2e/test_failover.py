"""Upstream failover drills C1-C3 as orchestration checks on a simulated rack (upstream §1.C).

After each fault the ComputeDomain must be Ready again with one entry per node, no duplicate
names or indices, and every node keeping the index it had (no index swaps):

* C1: force-delete workload pod 0 - its replacement runs with its channel;
* C2: force-delete every IMEX daemon of the domain - the DaemonSet recreates them on the same
  nodes, they rejoin under new pod IPs (with resident agents: the nodes' agent pods, which
  the agents' DaemonSet recreates; in the per-clique scope those that run the shared IMEX);
* C3: gracefully delete workload pod 1 - the same healing as C1, and no IMEX process is left
  holding a port (the daemons come back Ready).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod

from compute_domains.api import computedomain
from compute_domains.sim import topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS

pytestmark = pytest.mark.timeout(1500)
SHAPE = topology.Shape(racks=1, nodes_per_rack=3)
CD = "failover"


async def _workloads(admin: AsyncClient) -> list[Pod]:
    pods = [p async for p in admin.list(Pod, namespace="default", labels={"job": CD})]
    return sorted(
        (p for p in pods if p.metadata and not p.metadata.deletionTimestamp),
        key=lambda p: str(p.metadata.name),
    )  # type: ignore[union-attr]


async def _healed(
    admin: AsyncClient, indices: dict[str, int] | None, timeout: float = 300
) -> dict[str, int]:
    """Wait for 3 Ready entries and 3 running workloads; return node → index."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        st = await helpers.cd_status(admin, CD)
        nodes = st.get("nodes") or []
        pods = await _workloads(admin)
        last = (st.get("status"), nodes, [p.metadata.name for p in pods])  # type: ignore[union-attr]
        if (
            st.get("status") == "Ready"
            and len(nodes) == 3
            and all(n["status"] == "Ready" for n in nodes)
            and len(pods) == 3
            and all(helpers.ready(p) for p in pods)
        ):
            current = {n["name"]: n["index"] for n in nodes}
            assert len(set(current.values())) == 3, f"duplicate index: {nodes}"
            if indices is not None:
                assert current == indices, f"indices moved: {indices} -> {current}"
            return current
        await asyncio.sleep(1.0)
    raise AssertionError(f"not healed in {timeout:.0f}s: {last}")


async def _imex_pods(admin: AsyncClient, uid: str, nodes: set[str]) -> list[Pod]:
    """The pods running the CD's IMEX daemons: its daemon pods (its DaemonSet's, or the nodes'
    resident agents labelled for it), or in the per-clique scope the agent pods of its nodes,
    which run the clique's shared IMEX and carry no CD label (decision 0015)."""
    if not helpers.per_clique():
        return await helpers.daemon_pods(admin, uid)
    agents = {"app.kubernetes.io/component": "imex-agent"}
    return [
        p
        async for p in admin.list(Pod, namespace=DRIVER_NS, labels=agents)
        if p.spec is not None and p.spec.nodeName in nodes
    ]


async def test_c1_c2_c3_heal_with_stable_indices(admin: AsyncClient) -> None:
    await admin.create(
        computedomain.ComputeDomainResource(
            metadata=ObjectMeta(name=CD, namespace="default"),
            spec={"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{CD}-rct"}}},
        )
    )
    await admin.create(helpers.workload_deployment(CD, f"{CD}-rct", 3))
    indices = await _healed(admin, None)

    # C1: force-delete worker 0.
    first = (await _workloads(admin))[0]
    await admin.delete(
        Pod,
        str(first.metadata.name),
        namespace="default",  # type: ignore[union-attr]
        grace_period=0,
    )
    await _healed(admin, indices)

    # C2: force-delete every daemon of the domain at once.
    uid = (
        await admin.get(computedomain.ComputeDomainResource, CD, namespace="default")
    ).metadata.uid  # type: ignore[union-attr]
    daemons = await _imex_pods(admin, uid, set(indices))
    assert len(daemons) == 3
    for d in daemons:
        await admin.delete(
            Pod,
            str(d.metadata.name),
            namespace=DRIVER_NS,  # type: ignore[union-attr]
            grace_period=0,
        )
    await _healed(admin, indices)
    fresh = await _imex_pods(admin, uid, set(indices))
    assert {p.metadata.uid for p in fresh}.isdisjoint(  # type: ignore[union-attr]
        {d.metadata.uid for d in daemons}
    )  # type: ignore[union-attr]

    # C3: gracefully delete worker 1.
    second = (await _workloads(admin))[1]
    await admin.delete(Pod, str(second.metadata.name), namespace="default")  # type: ignore[union-attr]
    await _healed(admin, indices)

    await admin.delete(Deployment, CD, namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, CD, namespace="default")
