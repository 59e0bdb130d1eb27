"""Upstream G3 "global CD status" and D1 "daemon shutdown: status cleanup", with their limits,
and the status a job can trust (issue 18), on one rack of two simulated nodes.

* G3/D1: a ComputeDomain with ``numNodes: 1`` and one workload pod (upstream's
  ``channel-injection.yaml``): the pod is Ready within 100 s; the CD is ``Ready`` with its node
  within 4 s of that; deleting the pod takes under 10 s; then within 3 s the node entry is gone
  and the CD is ``NotReady`` (G3 allows 5 s), and the node's daemon goes away with its claim.
* Forming, then deleted under its workload: with ``numNodes: 0`` the CD is NotReady from its
  creation (``NoWorkload``) and while its pod is placed but its node's daemon is not Ready
  (``Forming``, the node listed NotReady); Ready only then. Deleted while the pod runs, it
  waits (finalizer kept, daemon running, ``Deleting``/``WaitingForWorkload`` naming the pod,
  an Event); a second CD's pod for that node waits meanwhile; once the pod is deleted the first
  CD goes, the node is released, and the second CD forms on it. Meanwhile the second CD reads
  ``PodsPending``, naming its pod and the first CD as the holder of the node (issue 29).
* A full clique (``maxNodesPerImexDomain: 1`` for two nodes of one clique, the 19th pod on an
  18-slot clique in small): the CD is NotReady with ``CliqueFull`` naming the node that cannot
  join, that node's pod event names the clique limit, and ``cdctl status`` at 80 columns says
  so with the node's whole name. Last in the module: it reinstalls the chart with that value.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Node, Pod

from compute_domains.api import computedomain, names, sharedimex
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_seed_example import _follow_log

pytestmark = pytest.mark.timeout(900)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
CD = "imex-channel-injection"
NODE = "gb200-r0-n00"


async def test_g3_d1_status_follows_the_workload(admin: AsyncClient) -> None:
    await admin.create(
        computedomain.ComputeDomainResource(
            metadata=ObjectMeta(name=CD, namespace="default"),
            spec={"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": f"{CD}-rct"}}},
        )
    )
    await admin.create(
        helpers.channel_pod(
            "imex-channel-injection",
            f"{CD}-rct",
            command="ls /dev/nvidia-caps-imex-channels; sleep 3600",
        )
    )

    async def pod_ready() -> bool:
        return helpers.ready(await admin.get(Pod, "imex-channel-injection", namespace="default"))

    await helpers.within(100, pod_ready, "workload pod Ready")
    uid = (
        await admin.get(computedomain.ComputeDomainResource, CD, namespace="default")
    ).metadata.uid  # type: ignore[union-attr]
    node = (await admin.get(Pod, "imex-channel-injection", namespace="default")).spec.nodeName  # type: ignore[union-attr]
    channel = f"channel{await helpers.expected_channel(admin, str(uid), str(node))}"
    logs = await _follow_log(admin, "imex-channel-injection", channel, timeout=30)
    assert channel in logs

    async def cd_ready() -> bool:
        st = await helpers.cd_status(admin, CD)
        return st.get("status") == "Ready" and len(st.get("nodes") or []) == 1

    await helpers.within(
        4, cd_ready, "G3: CD Ready with its node after the pod turned Ready", interval=0.1
    )
    daemons = await helpers.daemon_pods(admin, uid)
    # Per clique no pod carries the CD's label: the node's agent runs the shared IMEX (0015).
    assert len(daemons) == (0 if helpers.per_clique() else 1)

    await admin.delete(Pod, "imex-channel-injection", namespace="default")

    async def pod_gone() -> bool:
        try:
            await admin.get(Pod, "imex-channel-injection", namespace="default")
        except ApiError as err:
            return err.status.code == 404
        return False

    await helpers.within(10, pod_gone, "workload pod gone")

    async def cd_empty() -> bool:
        st = await helpers.cd_status(admin, CD)
        return not st.get("nodes") and st.get("status") == "NotReady"

    await helpers.within(3, cd_empty, "D1/G3: node entry removed and CD NotReady", interval=0.1)

    async def daemon_gone() -> bool:
        left = await helpers.daemon_pods(admin, uid)
        return not left

    await helpers.within(60, daemon_gone, "the node's daemon leaves with the last claim")
    await admin.delete(computedomain.ComputeDomainResource, CD, namespace="default")
    await helpers.within(
        60, lambda: helpers.gone(admin, computedomain.ComputeDomainResource, CD), "CD gone"
    )


def _summary(st: dict[str, Any]) -> tuple[str, str, dict[str, str]]:
    """``(status, Ready reason, node → entry status)`` of one status write."""
    reason = next((c["reason"] for c in st.get("conditions") or [] if c["type"] == "Ready"), "-")
    return st.get("status", "-"), reason, {n["name"]: n["status"] for n in st.get("nodes") or []}


async def _record(admin: AsyncClient, name: str, seen: list[Any]) -> None:
    """Every status write of CD ``name`` (from its creation on), as ``_summary``."""
    while True:
        try:
            async for _, obj in admin.watch(
                computedomain.ComputeDomainResource,
                namespace="default",
                fields={"metadata.name": name},
            ):
                st = obj.to_dict().get("status")  # type: ignore[no-untyped-call]
                if st:
                    seen.append(_summary(st))
        except httpx.HTTPError as err:
            seen.append(f"(watch broke: {type(err).__name__})")
            await asyncio.sleep(0.2)  # reconnect back-off, not a wait on the cluster


def _condition(st: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in st.get("conditions") or [] if c["type"] == kind), None)


async def _cd_events(admin: AsyncClient, name: str, reason: str) -> list[str]:
    return [
        str(e.message)
        async for e in admin.list(Event, namespace="default")
        if e.involvedObject.name == name and e.reason == reason
    ]


async def _cd_ready_on(admin: AsyncClient, name: str, node: str) -> bool:
    st = await helpers.cd_status(admin, name)
    return st.get("status") == "Ready" and _summary(st)[2].get(node) == "Ready"


async def test_a_cd_is_not_ready_while_forming_and_its_deletion_waits_for_its_workload(
    admin: AsyncClient,
) -> None:
    seen: list[Any] = []
    recorder = asyncio.create_task(_record(admin, "held", seen))
    uid = await helpers.create_cd(admin, "held")
    await admin.create(helpers.channel_pod("held-0", "held-rct", node=NODE, command="sleep 3600"))
    await helpers.within(100, lambda: helpers.pod_ready(admin, "held-0"), "workload pod Ready")
    await helpers.within(10, lambda: _cd_ready_on(admin, "held", NODE), "CD Ready on its node")
    recorder.cancel()
    await asyncio.gather(recorder, return_exceptions=True)

    # Created with its pod still forming: never Ready before the node's daemon is.
    first_ready = next(i for i, s in enumerate(seen) if s[0] == "Ready")
    assert seen[0] == ("NotReady", "NoWorkload", {}), seen
    forming = ("NotReady", "Forming", {NODE: "NotReady"})
    if helpers.per_clique():
        # The node's shared IMEX serves before the CD exists (decision 0015): formation is the
        # claim's prepare alone, quicker than the status's coalescing, so a Forming write (the
        # node listed NotReady, its claim not prepared) may come or not; nothing else may.
        allowed = (seen[0], forming)
        assert all(s in allowed for s in seen[:first_ready]), seen
    else:
        assert forming in seen[:first_ready], seen
    assert all(s[0] == "NotReady" for s in seen[:first_ready]), seen
    assert seen[first_ready] == ("Ready", "AllNodesReady", {NODE: "Ready"}), seen

    # Deleted while its workload runs: it waits, and says for whom.
    daemons = {str(p.metadata.uid) for p in await helpers.daemon_pods(admin, uid)}  # type: ignore[union-attr]
    await admin.delete(computedomain.ComputeDomainResource, "held", namespace="default")
    waiting: dict[str, Any] = {}

    async def deleting() -> bool:
        nonlocal waiting
        waiting = await helpers.cd_status(admin, "held")
        return _condition(waiting, "Deleting") is not None

    await helpers.within(30, deleting, "the deleted CD says it waits")
    cond = _condition(waiting, "Deleting")
    assert cond and cond["reason"] == "WaitingForWorkload" and "default/held-0" in cond["message"]
    assert waiting["status"] == "Ready", "the running job keeps its IMEX domain"
    await helpers.within(
        30,
        lambda: _has_event(admin, "held", "WaitingForWorkload", "default/held-0"),
        "a WaitingForWorkload Event naming the pod",
    )
    live = await helpers.daemon_pods(admin, uid)
    assert {str(p.metadata.uid) for p in live} == daemons and all(map(helpers.ready, live))  # type: ignore[union-attr]
    assert await helpers.pod_ready(admin, "held-0")

    # A follow-up CD wants the same node: its pod waits while the first CD holds it. In the
    # per-clique scope several CDs share a node (decision 0015): it forms there at once.
    await helpers.create_cd(admin, "next")
    await admin.create(helpers.channel_pod("next-0", "next-rct", node=NODE, command="sleep 3600"))
    if helpers.per_clique():
        await helpers.within(120, lambda: helpers.pod_ready(admin, "next-0"), "next-0 Ready")
        await helpers.within(10, lambda: _cd_ready_on(admin, "next", NODE), "next Ready")
        still = await helpers.cd_status(admin, "held")
        assert _condition(still, "Deleting") and still["status"] == "Ready", still
        assert await helpers.pod_ready(admin, "held-0")
        await admin.delete(Pod, "held-0", namespace="default")
        await helpers.within(
            60,
            lambda: helpers.gone(admin, computedomain.ComputeDomainResource, "held"),
            "the first CD gone once its workload is",
        )
        assert await _cd_ready_on(admin, "next", NODE), "next was disturbed by held's teardown"
        await admin.delete(Pod, "next-0", namespace="default")
        await admin.delete(computedomain.ComputeDomainResource, "next", namespace="default")
        await helpers.within(
            60, lambda: helpers.gone(admin, computedomain.ComputeDomainResource, "next"), "gone"
        )
        return
    await helpers.within(30, lambda: _placed_nowhere(admin, "next-0"), "next-0 created, Pending")
    assert (await helpers.cd_status(admin, "next")).get("status") != "Ready"

    async def next_names_its_pod_and_the_holder() -> bool:
        cond = _condition(await helpers.cd_status(admin, "next"), "Ready")
        message = str(cond.get("message")) if cond else ""
        return bool(
            cond
            and cond["reason"] == "PodsPending"
            and "pod default/next-0 (claim " in message
            and f"ComputeDomain default/held holds {NODE}" in message
        )

    await helpers.within(
        30, next_names_its_pod_and_the_holder, "next's status names next-0 and the CD holding"
    )

    # The workload ends: the deletion completes, the node's slots are released, next forms.
    await admin.delete(Pod, "held-0", namespace="default")
    await helpers.within(
        60,
        lambda: helpers.gone(admin, computedomain.ComputeDomainResource, "held"),
        "the first CD gone once its workload is",
    )
    await helpers.within(60, lambda: _no_daemons(admin, uid), "the first CD's daemon gone with it")
    await helpers.within(120, lambda: helpers.pod_ready(admin, "next-0"), "next-0 Ready on it")
    await helpers.within(10, lambda: _cd_ready_on(admin, "next", NODE), "next Ready on the node")

    await admin.delete(Pod, "next-0", namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, "next", namespace="default")
    await helpers.within(
        60, lambda: helpers.gone(admin, computedomain.ComputeDomainResource, "next"), "next gone"
    )


async def _has_event(admin: AsyncClient, name: str, reason: str, text: str) -> bool:
    return any(text in m for m in await _cd_events(admin, name, reason))


async def _placed_nowhere(admin: AsyncClient, pod: str) -> bool:
    p = await admin.get(Pod, pod, namespace="default")
    return bool(p.status and p.status.phase == "Pending" and not helpers.ready(p))


async def _no_daemons(admin: AsyncClient, uid: str) -> bool:
    return not await helpers.daemon_pods(admin, uid)


def _cdctl_status(sim: state.SimPaths) -> str:
    cdctl = Path(sys.executable).with_name("cdctl")
    env = {**os.environ, "COLUMNS": "80", "KUBECONFIG": str(sim.kubeconfig), "TERM": "dumb"}
    res = subprocess.run(
        [str(cdctl), "status", "full", "--driver-namespace", DRIVER_NS],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    return res.stdout


async def test_a_node_that_cannot_join_a_full_clique_is_named(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    helpers.upgrade(rack_sim, "controller.maxNodesPerImexDomain=1")
    if helpers.per_clique():
        await _a_fresh_shared_registry_of_one_slot(admin, rack_sim)
    await helpers.create_cd(admin, "full")
    await admin.create(helpers.workload_deployment("full", "full-rct", 2, command="sleep 3600"))
    st: dict[str, Any] = {}

    async def full() -> bool:
        nonlocal st
        st = await helpers.cd_status(admin, "full")
        cond = _condition(st, "Ready")
        return bool(cond and cond["reason"] == "CliqueFull")

    await helpers.within(240, full, "the CD says its clique is full")
    assert st["status"] == "NotReady"
    message = _condition(st, "Ready")["message"]  # type: ignore[index]
    blocked = next(n for n in ("gb200-r0-n00", "gb200-r0-n01") if f"node {n} " in message)
    assert "cannot join clique" in message and "it is full (1 of 1 slots" in message, message
    entries = {n["name"]: (n["status"], n["index"]) for n in st["nodes"]}
    assert entries[blocked] == ("NotReady", -1), st

    # The blocked node's pod says why in its event: the clique and its limit.
    pods = [p async for p in admin.list(Pod, namespace="default", labels={"job": "full"})]
    pod = next(str(p.metadata.name) for p in pods if p.spec and p.spec.nodeName == blocked)  # type: ignore[union-attr]

    async def pod_event() -> bool:
        return any(
            [
                e.involvedObject.name == pod
                and e.reason == "FailedPrepareDynamicResources"
                and f"node {blocked} cannot join clique" in str(e.message)
                and "it is full (1 of 1 slots, maxNodesPerIMEXDomain)" in str(e.message)
                async for e in admin.list(Event, namespace="default")
            ]
        )

    await helpers.within(120, pod_event, f"{pod}'s event names the clique limit")
    text = _cdctl_status(rack_sim)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80, text
    assert "NotReady (CliqueFull)" in text, text
    assert any(line.strip().startswith(blocked) for line in lines), text
    assert f"why: CliqueFull: node {blocked} cannot join clique" in " ".join(lines), text

    await admin.delete(Deployment, "full", namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, "full", namespace="default")
    await helpers.within(
        120, lambda: helpers.gone(admin, computedomain.ComputeDomainResource, "full"), "CD gone"
    )


async def _a_fresh_shared_registry_of_one_slot(admin: AsyncClient, sim: state.SimPaths) -> None:
    """Per-clique scope: the clique's shared registry keeps every node that ever registered
    (its shared IMEX is never restarted, decision 0015), so a lower limit applies to nodes
    joining later. To make a clique whose 1 slot is taken before the CD comes, the agents are
    rolled (``OnDelete``: they read the limit at start) and the registry is deleted: the agents
    follow it by watch and register again, and only the first gets the slot."""
    selector = "app.kubernetes.io/component=imex-agent"
    helpers.kubectl(sim, "delete", "pod", "-n", DRIVER_NS, "-l", selector, "--wait=true")
    agents = dict([selector.split("=")])

    async def agents_running() -> bool:
        # Running, not Ready: with one slot for two registered nodes, the node holding index 1
        # is outside the shared IMEX's node map until the registry is made again below.
        pods = [p async for p in admin.list(Pod, namespace=DRIVER_NS, labels=agents)]
        return len(pods) == 2 and all(p.status and p.status.phase == "Running" for p in pods)

    await helpers.within(120, agents_running, "both agent pods back and running")
    node = await admin.get(Node, NODE)
    registry = sharedimex.registry_name((node.metadata.labels or {})[names.GPU_CLIQUE_LABEL])  # type: ignore[union-attr]
    helpers.kubectl(sim, "delete", "computedomainclique", "-n", DRIVER_NS, registry)

    async def one_registered() -> bool:
        entries = await helpers.shared_entries(admin)
        return [status for _, status in entries.values()] == ["Ready"]

    await helpers.within(120, one_registered, f"{registry} again, with one Ready entry")
