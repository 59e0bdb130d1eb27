"""Where the chart's default places the controller: off the GPU nodes, through rolling updates.

A power cut of the node the controller runs on stops every ComputeDomain's status until it runs
again elsewhere, so the chart's default (an empty ``controller.affinity``) prefers a
control-plane node, then a node without GPUs. Session 24 saw a helm upgrade roll the one
replica onto a GPU node: the replicas' host spread pushed the new pod off the old one's host.
This test restarts the controller's rollout three times in a sim with a control-plane node and
requires every new pod there.
"""

from __future__ import annotations

import datetime

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS, suite_values

pytestmark = pytest.mark.timeout(600)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
NODES_MODE = "virtual"
SELECTOR = {"app.kubernetes.io/component": "controller"}


async def _control_plane_nodes(admin: AsyncClient) -> set[str]:
    return {
        str(n.metadata.name)
        async for n in admin.list(Node, labels={"node-role.kubernetes.io/control-plane": ""})
        if n.metadata
    }


async def _rolled_out(admin: AsyncClient, name: str, generation: int) -> list[Pod] | None:
    """The controller's pods once the rollout of ``generation`` is done and no old pod is left."""
    dep = await admin.get(Deployment, name, namespace=DRIVER_NS)
    st, want = dep.status, dep.spec.replicas if dep.spec else None  # type: ignore[union-attr]
    if st is None or (st.observedGeneration or 0) < generation:
        return None
    if not (st.updatedReplicas == st.readyReplicas == st.replicas == want):
        return None
    pods = [p async for p in admin.list(Pod, namespace=DRIVER_NS, labels=SELECTOR)]
    return pods if len(pods) == want else None  # terminating old pods are still listed


async def test_the_controller_stays_on_the_control_plane_through_rolling_updates(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    planes = await _control_plane_nodes(admin)
    assert planes, "the sim has no control-plane node to prefer"
    placed = ("controller.affinity", "controller.nodeSelector")
    if any(v.startswith(placed) for v in suite_values()):
        pytest.skip("the suite's values place the controller themselves")
    name = helpers.CONTROLLER_DEPLOYMENT
    for round_ in range(3):
        stamp = datetime.datetime.now(datetime.UTC).isoformat()
        patch = {"spec": {"template": {"metadata": {"annotations": {"restarted-at": stamp}}}}}
        dep = await admin.patch(
            Deployment, name, patch, namespace=DRIVER_NS, patch_type=PatchType.MERGE
        )
        generation = int(dep.metadata.generation or 0)  # type: ignore[union-attr]
        pods: list[Pod] = []

        async def done(generation: int = generation, pods: list[Pod] = pods) -> bool:
            pods[:] = await _rolled_out(admin, name, generation) or []
            return bool(pods)

        await helpers.within(120, done, f"rollout {round_ + 1} done")
        nodes = {str(p.spec.nodeName) for p in pods if p.spec}
        assert nodes <= planes, f"rollout {round_ + 1}: the controller ran on {nodes}"
