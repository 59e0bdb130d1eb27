"""Node reboot (spec §1.L.2, upstream never tested it; ai-cloud-validation #625 "a node rejoins a
ready CD after reboot"), on one simulated rack of two nodes.

A ComputeDomain with one workload pod per node is Ready; ``cdctl sim node reboot`` power-cycles
one node with a new boot id. Its daemon and workload containers start again; the node's plugin
drops its checkpoint (upstream's ``Invalidating checkpoint``), the kubelet prepares the pods'
claims again, and the domain is Ready again with both nodes, each keeping its index, every
workload Running with its channel, and nothing of the earlier boot left on the node.

While the node is down and its daemon starts again, the CD is not Ready (issue 18): the node's
entry stays listed NotReady (its workload holds its claim), the CD is NotReady with reason
``NodeNotReady``, and Events say when the node went NotReady and when it was back. Every
status write is recorded by a watch and printed when the test fails. The node rebooted is the
one that does not run the leading controller (the sim runs the controller replicas on the GPU
nodes; a leader rebooted with its node writes nothing until a standby takes its Lease, after
the short simulated reboot is over).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx2 as httpx
import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Node, Pod

from compute_domains.api import computedomain, names, nodemark, sharedimex
from compute_domains.plugin import cdi, checkpoint
from compute_domains.sim import control, state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.integration.plugin.objects import read_checkpoint

pytestmark = pytest.mark.timeout(900)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
CD = "reboot"
NODES = ("gb200-r0-n00", "gb200-r0-n01")
AGENT_LABELS = {"app.kubernetes.io/component": "imex-agent"}
COMMAND = "echo started; ls -la /dev/nvidia-caps-imex-channels; sleep 3600"


async def _workloads(admin: AsyncClient) -> list[Pod]:
    pods = [p async for p in admin.list(Pod, namespace="default", labels={"job": CD})]
    return [p for p in pods if p.metadata and not p.metadata.deletionTimestamp]


def _instance(p: Pod) -> str:
    """Which run of the pod's first container is running ("" if none): a restart, a reboot
    included, gives the container a new id (start times have only one-second resolution)."""
    statuses = (p.status.containerStatuses if p.status else None) or []
    now = statuses[0] if statuses else None
    if now and now.state and now.state.running and now.containerID:
        return f"{p.metadata.uid}/{now.containerID}"  # type: ignore[union-attr]
    return ""


async def _started(admin: AsyncClient, node: str) -> str:
    """Which run of the workload pod's container on ``node`` is running ("" if none)."""
    for p in await _workloads(admin):
        if p.spec and p.spec.nodeName == node and _instance(p):
            return _instance(p)
    return ""


async def _daemon_started(admin: AsyncClient, node: str) -> str:
    """Which run of the IMEX daemon container on ``node`` is running ("" if none): the CD's
    daemon pod (with resident agents the node's agent, labelled for the CD), or in the
    per-clique scope the node's agent pod running the shared IMEX (no CD label, 0015)."""
    labels = AGENT_LABELS if helpers.per_clique() else {names.COMPUTE_DOMAIN_LABEL: None}
    async for p in admin.list(Pod, namespace=DRIVER_NS, labels=labels):
        if p.spec and p.spec.nodeName == node and _instance(p):
            return _instance(p)
    return ""


async def _formed(admin: AsyncClient) -> dict[str, int] | None:
    """Node → index once the CD is Ready with 2 nodes and both workload pods are Ready."""
    st = await helpers.cd_status(admin, CD)
    nodes = st.get("nodes") or []
    live = await _workloads(admin)
    if (
        st.get("status") == "Ready"
        and len(nodes) == 2
        and all(n["status"] == "Ready" for n in nodes)
        and len(live) == 2
        and all(helpers.ready(p) for p in live)
    ):
        return {n["name"]: n["index"] for n in nodes}
    return None


def _state(st: dict[str, Any], victim: str) -> str:
    """``<CD status>/<Ready reason>/<victim entry status>`` of one status write."""
    entry = next((n for n in st.get("nodes") or [] if n["name"] == victim), None)
    reason = next((c["reason"] for c in st.get("conditions") or [] if c["type"] == "Ready"), "-")
    return f"{st.get('status')}/{reason}/{entry['status'] if entry else 'absent'}"


async def _watch_entry(admin: AsyncClient, seen: list[str], victim: str) -> None:
    """Record every status write as ``_state`` (the victim's entry "absent" when it has none).

    A watch, not a poll: the entry is NotReady for a few seconds only, and every status write
    shows up here. A watch the loaded machine breaks (a read error) is followed again from a
    fresh list, which shows the state then; the break is recorded, since a state that came and
    went during it is not seen.
    """
    while True:
        try:
            async for _, obj in admin.watch(
                computedomain.ComputeDomainResource,
                namespace="default",
                fields={"metadata.name": CD},
            ):
                seen.append(_state(obj.to_dict().get("status") or {}, victim))  # type: ignore[no-untyped-call]
        except httpx.HTTPError as err:
            seen.append(f"(watch broke: {type(err).__name__})")
            await asyncio.sleep(0.2)  # reconnect back-off, not a wait on the cluster


async def _cd_events(admin: AsyncClient, domain_uid: str, reason: str) -> list[str]:
    """Messages of the CD's Events with ``reason``."""
    return [
        str(e.message)
        async for e in admin.list(Event, namespace="default")
        if e.involvedObject.uid == domain_uid and e.reason == reason
    ]


async def _victim(admin: AsyncClient) -> str:
    """The node of the two that does not run the leading controller replica."""
    leader = await helpers.leader_node(admin)
    assert leader, "no controller replica holds the Lease"
    return next(n for n in NODES if n != leader)


async def _driver_pods_ready(admin: AsyncClient, node: str) -> bool:
    pods = [p async for p in admin.list(Pod, namespace=DRIVER_NS)]
    here = [
        p
        for p in pods
        if p.spec and p.spec.nodeName == node and p.metadata and not p.metadata.deletionTimestamp
    ]
    return bool(here) and all(helpers.ready(p) for p in here)


async def _channel_in_latest_start(admin: AsyncClient, pod: str, channel: int) -> None:
    log = ""

    async def seen() -> bool:
        nonlocal log
        log = await helpers.log_of(admin, pod)
        return re.findall(r"\bchannel(\d+)$", log.rpartition("started")[2], re.M) == [str(channel)]

    try:
        await helpers.within(30, seen, f"only channel{channel} in the latest start of {pod}")
    except AssertionError as err:
        raise AssertionError(f"{err}; log:\n{log[-2000:]}") from None


async def test_a_rebooted_node_rejoins_its_domain_with_its_index(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    domain_uid = await helpers.create_cd(admin, CD)
    await admin.create(helpers.workload_deployment(CD, f"{CD}-rct", 2, command=COMMAND))
    before: dict[str, int] = {}

    async def formed() -> bool:
        nonlocal before
        before = await _formed(admin) or {}
        return bool(before)

    await helpers.within(300, formed, "CD Ready with 2 nodes and 2 Ready workloads")
    # The rebooted node must not run the leading controller: while it is down nobody could
    # write the status (a standby takes the Lease only after it expires, about 17 s, longer
    # than the simulated reboot), so its NotReady spell would go unwritten. On a real cluster
    # the controller runs off the GPU nodes.
    victim = await _victim(admin)
    first_start = await _started(admin, victim)
    assert first_start
    first_daemon = await _daemon_started(admin, victim)
    assert first_daemon
    seen: list[str] = []
    watcher = asyncio.create_task(_watch_entry(admin, seen, victim))
    await asyncio.to_thread(
        control.request, rack_sim.root / "control.sock", {"op": "reboot", "node": victim}
    )

    after: dict[str, int] = {}

    async def reformed() -> bool:
        nonlocal after
        after = await _formed(admin) or {}
        restarted = (await _started(admin, victim)) not in ("", first_start)
        return bool(after) and restarted and await _driver_pods_ready(admin, victim)

    # The workload on the rebooted node runs again (a new container start), and the CD is Ready.
    try:
        await helpers.within(300, reformed, f"CD Ready again after {victim} rebooted")
    except AssertionError as err:
        pods = helpers.kubectl(rack_sim, "get", "pods", "-A", "-o", "wide")
        events = helpers.kubectl(rack_sim, "get", "events", "-A", "--sort-by=.lastTimestamp")
        logs = await helpers.component_logs(admin, "kubelet-plugin")
        status = await helpers.cd_status(admin, CD)
        raise AssertionError(
            f"{err}\nentry states: {seen}\n{status}\n{pods}\n{events[-6000:]}\n"
            + "\n".join(f"== {k}\n{v[-4000:]}" for k, v in logs.items())
        ) from None

    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    # The CD was not Ready while the node was down: its entry stayed listed, NotReady, and the
    # reason named the node; it never dropped out of the status.
    assert "NotReady/NodeNotReady/NotReady" in seen, f"entry states: {seen}"
    assert not any(s.endswith("/absent") for s in seen), f"entry states: {seen}"
    assert not any(s.startswith("Ready/") and not s.endswith("/Ready") for s in seen), seen
    went, back = (
        await _cd_events(admin, domain_uid, "NodeNotReady"),
        await _cd_events(admin, domain_uid, "NodeReady"),
    )
    assert any(victim in m for m in went), (went, seen)
    assert any(victim in m for m in back), (back, seen)
    # The rebooted node's IMEX daemon really went down and started again.
    daemon_now = await _daemon_started(admin, victim)
    assert daemon_now not in ("", first_daemon), (
        f"the daemon on {victim} did not start again: {first_daemon} -> {daemon_now}; "
        f"entry states: {seen}"
    )
    assert after == before, f"indices moved: {before} -> {after}"

    # Every workload sees its channel in its latest start (the log keeps earlier starts).
    for p in await _workloads(admin):
        channel = await helpers.expected_channel(admin, domain_uid, str(p.spec.nodeName))  # type: ignore[union-attr]
        await _channel_in_latest_start(admin, str(p.metadata.name), channel)  # type: ignore[union-attr]

    plugin_logs = await helpers.component_logs(admin, "kubelet-plugin")
    assert any("Invalidating checkpoint: node rebooted" in log for log in plugin_logs.values()), {
        k: v[-3000:] for k, v in plugin_logs.items()
    }

    # Nothing of the earlier boot is left: the node's checkpoint, claim CDI specs and label
    # are those of the claims prepared in this boot (its daemon's, with per-CD DaemonSets, and
    # its workload's). In the per-clique scope the node names the CD by its channel annotation.
    node = await admin.get(Node, victim)
    if helpers.per_clique():
        assert domain_uid in sharedimex.channels(node.metadata.annotations)  # type: ignore[union-attr]
    else:
        assert nodemark.domain_of(node.metadata) == domain_uid  # the label, or the annotation
    cp = read_checkpoint(rack_sim, victim)
    live = {uid for uid, e in cp.claims.items() if e.state is not checkpoint.ClaimState.UNPREPARED}
    assert len(live) == (1 if helpers.resident_agents() else 2), cp.claims
    assert all(cp.claims[uid].state is checkpoint.ClaimState.PREPARE_COMPLETED for uid in live), (
        cp.claims
    )
    specs = {f.name for f in (rack_sim.node_root(victim) / "var/run/cdi").glob("*claim*")}
    assert specs == {cdi.claim_spec_file_name(uid) for uid in live}

    async def one_daemon_per_node() -> bool:
        pods = await helpers.daemon_pods(admin, domain_uid)
        if helpers.per_clique():  # the agents run the shared IMEX; no pod names the CD
            assert pods == []
            pods = [p async for p in admin.list(Pod, namespace=DRIVER_NS, labels=AGENT_LABELS)]
        return len(pods) == 2 and not any(p.metadata and p.metadata.deletionTimestamp for p in pods)

    await helpers.within(60, one_daemon_per_node, "one daemon pod per node, none terminating")

    await admin.delete(Deployment, CD, namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, CD, namespace="default")
    await helpers.within(
        120, lambda: helpers.gone(admin, computedomain.ComputeDomainResource, CD), "CD gone"
    )
