"""An in-place upgrade from per-CD DaemonSets to resident agents under a running workload
(issue 26 point 4), on three virtual nodes of one clique.

The driver runs today's model first (``imex.agents=perComputeDomain``, ``imex.scope=perDomain``):
CD ``old`` forms on n00 and n01 with its own DaemonSet, one ``mnnvl-workload`` pod per node.
Then ``helm upgrade`` sets ``imex.agents=resident`` (with the suite's scope: per domain by
default, per clique under ``CD_E2E_SET=...,imex.scope=perClique``). What we decided, and show:

* **The running CD keeps working, untouched.** Its status stays Ready throughout (a watch from
  before the upgrade to after the new controller leads), its DaemonSet and daemon pods are the
  same objects with no restart, its nodes keep their indices, its workload pods are the same
  with no restart and say nothing new (the program reports every change of its IMEX domain).
  The nodes' new agents see the CD's node label and leave the CD to its own DaemonSet (their
  log says so; their pods carry no CD label), so no node runs a second ``nvidia-imex``.
* **New CDs are the new model's.** CD ``new`` on the free node n02 forms with no DaemonSet and
  no new pod in the driver namespace, its pod seeing its scope's channel: 0, served by n02's
  agent pod (per domain), or its own number from 1 in the clique's shared IMEX (per clique).
* **Once ``old`` is gone its nodes serve the new model**: its DaemonSet and daemon pods go, and
  CD ``next`` on n00 and n01 forms there as ``new`` did.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Pod

from compute_domains.api import computedomain, names
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_seed_example import _eventually, _follow_log
from tests.e2e.test_upgrade import _watch_cd

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=3)
NODES_MODE = "virtual"
N0, N1, N2 = "gb200-r0-n00", "gb200-r0-n01", "gb200-r0-n02"
AGENT_LABELS = {"app.kubernetes.io/component": "imex-agent"}
CDS = computedomain.ComputeDomainResource
CHANNEL = re.compile(r"/dev/nvidia-caps-imex-channels/channel(\d+)\b")


@pytest.fixture(scope="module")
def per_cd(rack_sim: state.SimPaths) -> Iterator[state.SimPaths]:
    """The sim running today's per-CD DaemonSets, whatever the suite's values."""
    helpers.upgrade(rack_sim, "imex.agents=perComputeDomain", "imex.scope=perDomain")
    yield rack_sim


def _workload_pod(cd: str, node: str) -> Pod:
    """One ``mnnvl-workload`` pod of ``cd`` (4 GPUs, its channel claim) pinned to ``node``."""
    doc = helpers.channel_pod(f"{cd}-{node[-3:]}", f"{cd}-rct", node=node, gpus=4).to_dict()
    doc["metadata"]["labels"] = {"job": cd}
    # Its verdict after 1 s, then a check every 2 s: every change of its IMEX domain is a line.
    doc["spec"]["containers"][0]["command"] = ["mnnvl-workload", "--wait", "1", "--watch", "2"]
    return Pod.from_dict(doc)  # type: ignore[no-any-return]


async def _pods(admin: AsyncClient, cd: str) -> list[Pod]:
    return [p async for p in admin.list(Pod, namespace="default", labels={"job": cd})]


async def _ready(admin: AsyncClient, cd: str, nodes: set[str]) -> dict[str, int] | None:
    """node -> index once ``cd`` is Ready on exactly ``nodes`` with its pods Running."""
    st = await helpers.cd_status(admin, cd)
    entries = st.get("nodes") or []
    pods = await _pods(admin, cd)
    if (
        st.get("status") == "Ready"
        and {n["name"] for n in entries} == nodes
        and all(n["status"] == "Ready" for n in entries)
        and len(pods) == len(nodes)
        and all(helpers.ready(p) for p in pods)
    ):
        return {n["name"]: n["index"] for n in entries}
    return None


def _ids(pods: list[Pod]) -> dict[str, tuple[str, list[int]]]:
    """name -> (uid, restart counts)."""
    return {
        str(p.metadata.name): (  # type: ignore[union-attr]
            str(p.metadata.uid),  # type: ignore[union-attr]
            [c.restartCount for c in (p.status.containerStatuses if p.status else None) or []],
        )
        for p in pods
    }


async def _settled_log(admin: AsyncClient, pod: str) -> str | None:
    """The workload's log once it gave its verdict and its last domain line counts both peers
    READY (of the 18 static names): what it says next is a change of its IMEX domain."""
    log = await helpers.log_of(admin, pod)
    # "IMEX domain:" lines only: the transport line names "this IMEX domain" too (0d6f180).
    domain = [line for line in log.splitlines() if "IMEX domain:" in line]
    verdict = "NOT READY:" in log or "OK:" in log
    return log if verdict and domain and "2/18 configured nodes READY" in domain[-1] else None


async def _driver_pod_ids(admin: AsyncClient) -> set[tuple[str, str]]:
    return {
        (str(p.metadata.name), str(p.metadata.uid))  # type: ignore[union-attr]
        async for p in admin.list(Pod, namespace=DRIVER_NS)
        if p.metadata is not None and not p.metadata.deletionTimestamp
    }


async def _agents(admin: AsyncClient) -> dict[str, Pod]:
    return {
        str(p.spec.nodeName): p  # type: ignore[union-attr]
        async for p in admin.list(Pod, namespace=DRIVER_NS, labels=AGENT_LABELS)
        if p.spec is not None and p.metadata is not None and not p.metadata.deletionTimestamp
    }


async def _forms_in_the_new_model(admin: AsyncClient, cd: str, nodes: set[str]) -> None:
    """``cd`` (one pod per node of ``nodes``) forms with no DaemonSet and no new driver pod,
    each pod seeing exactly its scope's channel; per domain the nodes' agents serve it."""
    before = await _driver_pod_ids(admin)
    uid = await helpers.create_cd(admin, cd, num_nodes=len(nodes))
    for node in sorted(nodes):
        await admin.create(_workload_pod(cd, node))
    await _eventually(lambda: _ready(admin, cd, nodes), 300, f"{cd} Ready on {sorted(nodes)}")
    assert await _driver_pod_ids(admin) == before, f"forming {cd} created a driver pod"
    assert [
        d
        async for d in admin.list(
            DaemonSet, namespace=DRIVER_NS, labels={names.COMPUTE_DOMAIN_LABEL: uid}
        )
    ] == [], f"{cd} got a DaemonSet"
    serving = {str(p.spec.nodeName) for p in await helpers.daemon_pods(admin, uid)}  # type: ignore[union-attr]
    agents = await _agents(admin)
    if helpers.per_clique():
        assert serving == set(), "a per-clique CD labels no pod (the shared IMEX serves it)"
    else:
        assert serving == nodes, serving
        assert {
            str((p.metadata.labels or {}).get(names.COMPUTE_DOMAIN_LABEL))  # type: ignore[union-attr]
            for n, p in agents.items()
            if n in nodes
        } == {uid}
    for node in sorted(nodes):
        channel = await helpers.expected_channel(admin, uid, node)
        log = await _follow_log(admin, f"{cd}-{node[-3:]}", "configured nodes READY")
        assert set(CHANNEL.findall(log)) == {str(channel)}, (cd, node, channel, log)


async def test_upgrade_to_resident_agents_keeps_a_running_cd_and_serves_new_ones(
    admin: AsyncClient, per_cd: state.SimPaths
) -> None:
    # Today's model: CD old with its own DaemonSet, one workload pod on n00 and n01.
    uid = await helpers.create_cd(admin, "old", num_nodes=2)
    for node in (N0, N1):
        await admin.create(_workload_pod("old", node))
    indices = await _eventually(
        lambda: _ready(admin, "old", {N0, N1}), 300, "old Ready on n00 and n01"
    )
    ds = await admin.get(DaemonSet, names.daemon_object_name(uid), namespace=DRIVER_NS)
    daemons = _ids(await helpers.daemon_pods(admin, uid))
    assert len(daemons) == 2, daemons
    logs: dict[str, str] = {}
    for node in (N0, N1):
        logs[node] = await _eventually(
            lambda n=node: _settled_log(admin, f"old-{n[-3:]}"),  # type: ignore[misc]
            120,
            f"old's workload on {node} seeing both peers READY",
        )
        assert "/dev/nvidia-caps-imex-channels/channel0 " in logs[node], logs[node]
    workload = _ids(await _pods(admin, "old"))

    # The upgrade, watched.
    seen: list[str] = []
    watcher = asyncio.create_task(_watch_cd(admin, "old", seen))

    async def watching() -> bool:
        return bool(seen)

    await helpers.within(10, watching, "the status watch started")
    try:
        await asyncio.to_thread(helpers.upgrade, per_cd, "imex.agents=resident")

        async def agents_ready() -> bool:
            agents = await _agents(admin)
            return set(agents) == {N0, N1, N2} and all(helpers.ready(p) for p in agents.values())

        await _eventually(agents_ready, 180, "an agent pod Ready on each node")

        async def declined() -> bool:
            for node in (N0, N1):
                pod = (await _agents(admin))[node]
                log = await helpers.log_of(admin, str(pod.metadata.name), namespace=DRIVER_NS)  # type: ignore[union-attr]
                if f"CD {uid} has its own DaemonSet" not in log:
                    return False
            return True

        await _eventually(declined, 120, "n00's and n01's agents leaving old to its DaemonSet")
        # The new controller has reconciled old since (its status is the new leader's).
        await _eventually(
            lambda: _ready(admin, "old", {N0, N1}), 120, "old Ready after the upgrade"
        )
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    print(f"old's status during the upgrade: {' -> '.join(seen)}")
    assert seen == ["Ready"], f"old did not stay Ready: {seen}"
    assert await _ready(admin, "old", {N0, N1}) == indices
    now = await admin.get(DaemonSet, names.daemon_object_name(uid), namespace=DRIVER_NS)
    assert now.metadata.uid == ds.metadata.uid  # type: ignore[union-attr]
    assert _ids(await helpers.daemon_pods(admin, uid)) == daemons, "old's daemons were replaced"
    assert _ids(await _pods(admin, "old")) == workload, "old's workload was replaced"
    for node in (N0, N1):
        log = await helpers.log_of(admin, f"old-{node[-3:]}")
        assert log == logs[node], f"old's workload on {node} saw its domain change:\n{log}"

    # A new CD takes the new model, on the free node.
    await _forms_in_the_new_model(admin, "new", {N2})
    assert seen == ["Ready"] and await _ready(admin, "old", {N0, N1}) == indices

    # old deleted: its DaemonSet goes and its nodes serve the new model.
    for node in (N0, N1):
        await admin.delete(Pod, f"old-{node[-3:]}", namespace="default")
    await admin.delete(CDS, "old", namespace="default")

    async def old_gone() -> bool:
        return (
            await helpers.gone(admin, CDS, "old")
            and await helpers.gone(admin, DaemonSet, names.daemon_object_name(uid), DRIVER_NS)
            and not await helpers.daemon_pods(admin, uid)
        )

    await _eventually(old_gone, 180, "old, its DaemonSet and its daemon pods gone")
    await _forms_in_the_new_model(admin, "next", {N0, N1})

    for cd, nodes in (("new", (N2,)), ("next", (N0, N1))):
        for node in nodes:
            await admin.delete(Pod, f"{cd}-{node[-3:]}", namespace="default")
        await admin.delete(CDS, cd, namespace="default")
    for cd in ("new", "next"):
        await _eventually(lambda c=cd: helpers.gone(admin, CDS, c), 180, f"{cd} gone")  # type: ignore[misc]
