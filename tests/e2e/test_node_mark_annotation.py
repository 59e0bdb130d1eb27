"""The per-domain node mark as an annotation (``imex.nodeMark=annotation``, decision 0026) on two
virtual nodes with resident agents.

First the chart refuses the value while a ComputeDomain runs on a DaemonSet of its own (its
daemon pods are placed by the node label, which the annotation would not set), naming that
DaemonSet; once that CD is gone the same values install. (When the suite itself runs with the
resident agents, ``CD_E2E_SET``, no CD has a DaemonSet of its own and that first part is left
out.) Then a two-node ComputeDomain forms:
each node carries the CD's UID as the annotation ``resource.nvidia.com/computeDomain`` and no
such label, the agent pods serve it (NVIDIA's pod label), the CD goes Ready and each workload
runs with its channel and reaches both nodes' IMEX. Deleting the workload and the CD leaves no
mark in either form.
"""

from __future__ import annotations

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.api import computedomain, names
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_seed_example import _eventually, _follow_log

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
NODES_MODE = "virtual"
VALUES = ("imex.agents=resident", "imex.nodeMark=annotation")
KEY = names.COMPUTE_DOMAIN_LABEL


async def _marks(admin: AsyncClient) -> dict[str, tuple[str | None, str | None]]:
    """Node → (its CD label, its CD annotation), for the nodes with either."""
    found = {}
    async for n in admin.list(Node):
        meta = n.metadata
        assert meta is not None and meta.name
        pair = ((meta.labels or {}).get(KEY), (meta.annotations or {}).get(KEY))
        if pair != (None, None):
            found[meta.name] = pair
    return found


async def _refused_over_a_per_cd_daemonset(admin: AsyncClient, sim: state.SimPaths) -> None:
    """The chart refuses the annotation while a CD runs on a DaemonSet of its own, naming it;
    the CD is deleted and its DaemonSet gone afterwards."""
    old = await helpers.create_cd(admin, "own-ds", num_nodes=2)

    async def has_daemonset() -> bool:
        found = admin.list(DaemonSet, namespace=DRIVER_NS, labels={KEY: old})
        return bool([d async for d in found])

    await _eventually(has_daemonset, 120, "the per-CD DaemonSet of the first CD")
    with pytest.raises(AssertionError) as refused:
        helpers.upgrade(sim, *VALUES)
    why = str(refused.value)
    assert "imex.nodeMark=annotation while ComputeDomains run on DaemonSets of their own" in why
    assert f"{names.daemon_object_name(old)} (ComputeDomain {old})" in why
    await admin.delete(computedomain.ComputeDomainResource, "own-ds", namespace="default")

    async def no_daemonset() -> bool:
        return not await has_daemonset()

    await _eventually(no_daemonset, 120, "the first CD's DaemonSet gone")


async def test_refused_over_per_cd_daemonsets_then_a_cd_forms_marked_by_annotation(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    if helpers.per_clique():
        pytest.skip("the node mark is the per-domain scope's; a per-clique CD sets none")
    if not helpers.resident_agents():  # else the suite's values leave no per-CD DaemonSet
        await _refused_over_a_per_cd_daemonset(admin, rack_sim)
    helpers.upgrade(rack_sim, *VALUES)

    uid = await helpers.create_cd(admin, "marked", num_nodes=2)
    await admin.create(helpers.workload_deployment("job", "marked-rct", 2))

    await _eventually(
        lambda: helpers.formed(admin, "marked", 2), 300, "the CD Ready with 2 nodes, 2 running pods"
    )
    marks = await _marks(admin)
    assert sorted(marks.values()) == [(None, uid), (None, uid)], marks
    serving = await helpers.daemon_pods(admin, uid)
    assert {p.spec.nodeName for p in serving if p.spec} == set(marks)
    for pod in [p async for p in admin.list(Pod, namespace="default", labels={"job": "job"})]:
        assert pod.metadata is not None and pod.metadata.name
        log = await _follow_log(admin, pod.metadata.name, "2/18 configured nodes READY")
        assert "/dev/nvidia-caps-imex-channels/channel0" in log, log

    await admin.delete(Deployment, "job", namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, "marked", namespace="default")

    async def unmarked() -> bool:
        return not await _marks(admin) and not await helpers.daemon_pods(admin, None)

    await _eventually(unmarked, 120, "no node mark in either form, no agent serving")
