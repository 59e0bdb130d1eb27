"""Resident IMEX agents (``imex.agents=resident``, issue 26 step 1) on two virtual nodes.

The chart is reinstalled with the value; then a two-node ComputeDomain forms without any pod
being created for it: the set of pods in the driver namespace (names and UIDs) is the same
after formation as before (only labels change), the node's agent pod carries the CD's label
(and the clique ID label) while it serves the CD, the CD goes Ready with both nodes, and each
workload pod runs with its channel and reaches its node's IMEX (both nodes READY). Deleting the
workload and the CD removes the labels from the agent pods and leaves no clique, node label,
claim, DaemonSet or per-CD folder behind, with the same agent pods still running.

With ``imex.agents=perComputeDomain`` (``AGENTS`` below) the no-new-pod assertion fails on the
CD's DaemonSet pods: that is how this test was shown to catch the per-CD model.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import clique, computedomain, names, nodemark
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_seed_example import _eventually, _follow_log

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
NODES_MODE = "virtual"
AGENTS = "resident"
CD = "resident-cd"
AGENT_LABELS = {"app.kubernetes.io/component": "imex-agent"}


@pytest.fixture(scope="module")
def resident(rack_sim: state.SimPaths) -> Iterator[state.SimPaths]:
    """The sim with the chart reinstalled in ``AGENTS`` mode."""
    helpers.upgrade(rack_sim, f"imex.agents={AGENTS}")
    yield rack_sim


def _pod_ids(pods: list[Pod]) -> set[tuple[str, str]]:
    return {(p.metadata.name or "", p.metadata.uid or "") for p in pods if p.metadata is not None}


async def _driver_pods(admin: AsyncClient) -> list[Pod]:
    return [p async for p in admin.list(Pod, namespace=DRIVER_NS)]


async def _agents(admin: AsyncClient) -> list[Pod]:
    return [p async for p in admin.list(Pod, namespace=DRIVER_NS, labels=AGENT_LABELS)]


async def test_a_cd_forms_with_no_pod_created_and_leaves_nothing(
    admin: AsyncClient, resident: state.SimPaths
) -> None:
    if helpers.per_clique():
        pytest.skip(
            "per-clique scope: this is the per-domain agent serving one CD (its pod carrying "
            "the CD label, the CD's own clique, channel 0); a per-clique CD is served by the "
            "clique's shared IMEX with no CD label and its own channel (decision 0015), shown "
            "by test_per_clique.py and test_per_clique_annotated.py"
        )
    if AGENTS == "resident":

        async def agents_ready() -> bool:
            pods = await _agents(admin)
            return len(pods) == 2 and all(helpers.ready(p) for p in pods)

        await _eventually(agents_ready, 180, "an agent pod Ready on each node")

    async def settled() -> list[Pod] | None:
        pods = await _driver_pods(admin)
        return pods if all(helpers.ready(p) for p in pods) else None

    before = _pod_ids(await _eventually(settled, 180, "every driver pod Ready"))

    uid = await helpers.create_cd(admin, CD, num_nodes=2)
    await admin.create(helpers.workload_deployment("job", f"{CD}-rct", 2))

    await _eventually(
        lambda: helpers.formed(admin, CD, 2), 300, "the CD Ready with 2 nodes and 2 running pods"
    )

    # No pod was created for the CD: the driver namespace holds exactly the pods it held.
    assert _pod_ids(await _driver_pods(admin)) == before

    # The agent pods serve it: they carry its label (NVIDIA's selector finds them).
    serving = await helpers.daemon_pods(admin, uid)
    assert _pod_ids(serving) == _pod_ids(await _agents(admin))
    assert all((p.metadata.labels or {}).get(names.CLIQUE_ID_LABEL) for p in serving if p.metadata)
    assert [
        d
        async for d in admin.list(
            DaemonSet, namespace=DRIVER_NS, labels={names.COMPUTE_DOMAIN_LABEL: uid}
        )
    ] == []
    st = await helpers.cd_status(admin, CD)
    assert sorted(n["index"] for n in st["nodes"]) == [0, 1]

    # Each workload has its channel and reaches its node's IMEX (the agent's): both nodes READY
    # of the 18 static names (the rest of the rack is absent, so the domain reports DEGRADED, as
    # in test_two_racks with per-CD daemons).
    for pod in [p async for p in admin.list(Pod, namespace="default", labels={"job": "job"})]:
        assert pod.metadata is not None and pod.metadata.name
        # Its first verdict may count 1/18 while the peer's link comes up (seen twice on 2
        # loaded cores, as in test_two_racks); it reports every change: follow until 2/18.
        log = await _follow_log(admin, pod.metadata.name, "2/18 configured nodes READY")
        assert "/dev/nvidia-caps-imex-channels/channel0" in log, log
        assert "2/18 configured nodes READY" in log, log

    await admin.delete(Deployment, "job", namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, CD, namespace="default")

    leftovers: list[object] = []

    async def nothing_left() -> bool:
        left: list[object] = list(await helpers.daemon_pods(admin, None))
        left += [
            c async for c in admin.list(clique.ComputeDomainCliqueResource, namespace=DRIVER_NS)
        ]
        left += await helpers.marked_nodes(admin)
        left += [c async for c in admin.list(ResourceClaim, namespace="*")]
        left += [
            d
            async for d in admin.list(
                DaemonSet, namespace=DRIVER_NS, labels={names.COMPUTE_DOMAIN_LABEL: None}
            )
        ]
        left += [
            folder
            for n in range(2)
            for folder in (
                resident.node_root(f"gb200-r0-n{n:02d}")
                / "var/lib/kubelet/plugins/compute-domain.nvidia.com/domains"
            ).glob("*")
        ]
        leftovers[:] = left
        return not left

    try:
        await _eventually(nothing_left, 120, "no serving label, clique, node label, claim, folder")
    except AssertionError as err:
        raise AssertionError(f"{err}; left: {leftovers}") from None
    # The agents were never replaced: the same pods run, serving nothing.
    assert _pod_ids(await _driver_pods(admin)) == before


async def test_an_agent_leaves_a_cd_with_its_own_daemonset_alone(
    admin: AsyncClient, resident: state.SimPaths
) -> None:
    """A CD formed before the switch to resident agents keeps its own DaemonSet; the node's
    agent must not start a second IMEX for it. Stood in for by a DaemonSet of the CD's name
    whose pods go nowhere, so only the agent could serve the CD here."""
    if AGENTS != "resident":
        pytest.skip("the agent exists only with resident agents")
    if helpers.per_clique():
        pytest.skip(
            "per-clique scope: a CD made now is per clique, and every idle node already runs "
            "the clique's shared IMEX, so no per-domain claim (the older CD's) is allocated "
            "there (decision 0015); the real path, a running per-CD DaemonSet CD kept through "
            "the switch, is test_resident_upgrade.py in this scope"
        )
    node = "gb200-r0-n00"
    uid = await helpers.create_cd(admin, "older-cd", num_nodes=1)
    selector = {"app": "older-cd-daemon"}
    await admin.create(
        DaemonSet.from_dict(
            {
                "metadata": {
                    "name": names.daemon_object_name(uid),
                    "namespace": DRIVER_NS,
                    "labels": {names.COMPUTE_DOMAIN_LABEL: uid},
                },
                "spec": {
                    "selector": {"matchLabels": selector},
                    "template": {
                        "metadata": {"labels": selector},
                        "spec": {
                            "nodeSelector": {"no-such-label": "anywhere"},
                            "containers": [{"name": "c", "image": "pause"}],
                        },
                    },
                },
            }
        )
    )
    await admin.create(helpers.channel_pod("older", "older-cd-rct", node=node, command="sleep 1"))

    async def labelled() -> bool:
        found = await admin.get(Node, node)
        return nodemark.domain_of(found.metadata) == uid  # the label, or the annotation

    await _eventually(labelled, 120, "the node marked for the older CD")
    (agent,) = [p for p in await _agents(admin) if p.spec is not None and p.spec.nodeName == node]
    assert agent.metadata is not None and agent.metadata.name

    async def declined() -> bool:
        log = await helpers.log_of(admin, str(agent.metadata.name), namespace=DRIVER_NS)  # type: ignore[union-attr]
        return "has its own DaemonSet" in log

    await _eventually(declined, 60, "the agent saying it leaves the CD to its own DaemonSet")
    now = await admin.get(Pod, str(agent.metadata.name), namespace=DRIVER_NS)
    assert names.COMPUTE_DOMAIN_LABEL not in (now.metadata.labels or {})  # type: ignore[union-attr]
    assert await helpers.daemon_pods(admin, uid) == []

    await admin.delete(Pod, "older", namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, "older-cd", namespace="default")

    async def cleaned() -> bool:
        left = [
            d
            async for d in admin.list(
                DaemonSet, namespace=DRIVER_NS, labels={names.COMPUTE_DOMAIN_LABEL: uid}
            )
        ]
        return not left and not await labelled()

    await _eventually(cleaned, 120, "the older CD's DaemonSet and node label gone")
