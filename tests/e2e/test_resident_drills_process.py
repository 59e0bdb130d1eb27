"""Resident-agent drills on process-mode nodes, where the agent is a process that can be killed.

``test_resident_drills``' agent-pod deletion runs here too (first), on process nodes.

kill -9 of a node's agent mid-formation (issue 26 point 4): as soon as the agent on one node has
taken up the CD (its pod carries the CD label), its process gets SIGKILL. Its ``nvidia-imex``
child dies with it (parent-death signal), the kubelet restarts the container, and the new
agent picks the CD up again from the Node's label. The CD must still converge: Ready with both
nodes, indices 0 and 1, one agent pod per node serving it, and exactly one ``nvidia-imex`` per
node (two in all; the killed agent's is gone). In the per-clique scope (``CD_E2E_SET=...,
imex.scope=perClique``) "taken up" is the victim's Node annotated with the CD's channel (the
agent's shared IMEX runs before the CD), no pod carries the CD label, and deleting the CD
leaves the shared IMEX running, the same processes.

Throughout, from the kill until the CD is Ready again, the CD must never be reported Ready while
the victim has no ``nvidia-imex`` (a watch on the CD; each Ready write is checked against the
node's processes at once), and in the per-clique scope a prepare begun on the victim after the
kill (a probe pod of a second CD, pinned there) must not pass (its container start) while the
victim has no ``nvidia-imex``: issue 26's defect 3, where the dead agent's registry entry kept
saying Ready for about 2 s.

kill -9 of a node's kubelet plugin mid-formation (issue 26 point 4): as soon as the plugin has
begun the CD's prepare (its Node names the CD), its process gets SIGKILL. The kubelet restarts
it, the prepare is retried, and the CD converges the same way, with neither agent restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from compute_domains.api import computedomain, names, sharedimex
from compute_domains.containers import procs
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_resident_agents import _agents, resident  # noqa: F401  (the fixture)
from tests.e2e.test_resident_drills import (  # noqa: F401  (the drill, on process nodes too)
    VICTIM,
    _all_ready,
    _eventually,
    test_deleting_a_nodes_agent_pod_goes_notready_then_ready_on_the_same_indices,
)

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
NODES_MODE = "process"
CD = "kill-cd"
PLUGIN_CD = "plugin-kill-cd"
PROBE_CD = "kill-probe-cd"
NODES = ("gb200-r0-n00", VICTIM)


def _env(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (part.decode(errors="replace").partition("=") for part in raw.split(b"\0") if part)
    return {k: v for k, _, v in pairs}


def _processes(paths: state.SimPaths, mark: str) -> list[tuple[int, dict[str, str]]]:
    recorded = state.read_state(paths)
    assert recorded is not None
    found = []
    for pid in helpers._descendants(recorded.supervisor_pid):
        line = " ".join(procs.pid_cmdline(pid))
        if mark in line:
            found.append((pid, _env(pid)))
    return found


def _agent_pids(paths: state.SimPaths, node: str) -> list[int]:
    return [p for p, env in _processes(paths, "agent run") if env.get("NODE_NAME") == node]


def _imex_by_node() -> dict[str, list[int]]:
    """Every simulated nvidia-imex on this machine, by its NODE_NAME (inherited from its agent):
    all of /proc, not only the sim's descendants, so an orphaned one counts too."""
    found: dict[str, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and "imex_main imex" in " ".join(
            procs.pid_cmdline(int(entry.name))
        ):
            node = _env(int(entry.name)).get("NODE_NAME", "")
            found.setdefault(node, []).append(int(entry.name))
    return {node: pids for node, pids in found.items() if node in NODES}


async def test_kill_9_of_an_agent_mid_formation_still_converges_with_one_imex_per_node(
    admin: AsyncClient,
    resident: state.SimPaths,  # noqa: F811  (the fixture imported above)
) -> None:
    async def agents_ready() -> bool:
        pods = await _agents(admin)
        return len(pods) == 2 and all(helpers.ready(p) for p in pods)

    await _eventually(agents_ready, 180, "an agent pod Ready on each node")
    (victim_pid,) = _agent_pids(resident, VICTIM)
    if helpers.per_clique():  # its template must exist before the kill: the probe is quick
        await helpers.create_cd(admin, PROBE_CD)
        await _eventually(lambda: _template(admin), 60, "the probe CD's claim template")
    uid = await helpers.create_cd(admin, CD, num_nodes=2)
    await admin.create(helpers.workload_deployment(CD, f"{CD}-rct", 2))
    try:
        await _kill_the_agent_mid_formation(admin, resident, uid, victim_pid)
    finally:  # a failure must not leave its job holding both nodes' GPUs for the next drill
        with contextlib.suppress(ApiError):
            await admin.delete(Pod, PROBE_CD, namespace="default")
        for kind, name in (
            (Deployment, CD),
            (computedomain.ComputeDomainResource, CD),
            (computedomain.ComputeDomainResource, PROBE_CD),
        ):
            with contextlib.suppress(ApiError):  # gone already when the drill passed
                await admin.delete(kind, name, namespace="default")


async def _template(admin: AsyncClient) -> bool:
    try:
        await admin.get(ResourceClaimTemplate, f"{PROBE_CD}-rct", namespace="default")
    except ApiError:
        return False
    return True


async def _never_ready_without_imex(admin: AsyncClient, violations: list[str]) -> None:
    """Until cancelled: every turn of CD ``CD`` to Ready, and (per clique) the probe pod's
    first container start, is checked against the victim's ``nvidia-imex`` at once."""

    async def statuses() -> None:
        # A turn to Ready is checked (the first event is the CD as it was at the kill: a CD
        # Ready then may still read so until the controller has seen the agent's pod die).
        before: str | None = None
        async for _op, obj in admin.watch(
            computedomain.ComputeDomainResource,
            namespace="default",
            fields={"metadata.name": CD},
        ):
            status = obj.to_dict().get("status") or {}
            now = status.get("status")
            turned = now == "Ready" and before is not None and before != "Ready"
            if turned and not _imex_by_node().get(VICTIM):
                violations.append(f"CD Ready with no nvidia-imex on {VICTIM}: {status}")
            before = now or ""

    async def probe() -> None:
        async for _op, pod in admin.watch(
            Pod, namespace="default", fields={"metadata.name": PROBE_CD}
        ):
            started = (
                [c for c in (pod.status.containerStatuses or []) if c.state and c.state.running]
                if pod.status
                else []
            )
            if started:
                if not _imex_by_node().get(VICTIM):
                    violations.append(f"a prepare on {VICTIM} passed with no nvidia-imex there")
                return

    async with asyncio.TaskGroup() as tg:
        tg.create_task(statuses())
        if helpers.per_clique():
            tg.create_task(probe())


async def _kill_the_agent_mid_formation(
    admin: AsyncClient, sim: state.SimPaths, uid: str, victim_pid: int
) -> None:
    # Mid-formation: the moment the victim's agent has taken the CD up (labelled its pod); in
    # the per-clique scope, where the agent's shared IMEX runs before any CD, the moment the
    # victim's plugin gave the CD its channel there.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 180
    while not await _taken_up(admin, uid, VICTIM):
        assert loop.time() < deadline, "the victim's node never took the CD up"
        await asyncio.sleep(0.1)
    was_ready = await _all_ready(admin, CD) is not None
    os.kill(victim_pid, signal.SIGKILL)
    t0 = loop.time()
    violations: list[str] = []
    watching = asyncio.create_task(_never_ready_without_imex(admin, violations))
    if helpers.per_clique():  # a prepare on the victim begun after the kill
        await admin.create(helpers.channel_pod(PROBE_CD, f"{PROBE_CD}-rct", node=VICTIM, gpus=0))

    async def converged() -> dict[str, int] | None:
        now = await _all_ready(admin, CD)
        pids = _agent_pids(sim, VICTIM)
        return now if now is not None and pids and victim_pid not in pids else None

    try:
        indices = await _eventually(converged, 120, "the CD Ready again after the agent's kill -9")
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    print(
        f"\nagent on {VICTIM} killed (-9) mid-formation (CD Ready before: {was_ready}): "
        f"Ready after {loop.time() - t0:.1f}s"
    )
    assert not violations, violations
    assert sorted(indices.values()) == [0, 1], indices
    (agent,) = [p for p in await _agents(admin) if p.spec and p.spec.nodeName == VICTIM]
    assert agent.status is not None and agent.status.containerStatuses
    assert agent.status.containerStatuses[0].restartCount >= 1  # the same pod, restarted
    await _one_imex_per_node_then_released(admin, uid, CD)


async def _taken_up(admin: AsyncClient, uid: str, node: str) -> bool:
    """Whether ``node`` has begun serving CD ``uid``: its agent pod labelled for it (per
    domain), or the Node annotated with the CD's channel (per clique: the plugin's prepare)."""
    if helpers.per_clique():
        found = await admin.get(Node, node)
        return uid in sharedimex.channels(found.metadata.annotations)  # type: ignore[union-attr]
    return any(p.spec and p.spec.nodeName == node for p in await helpers.daemon_pods(admin, uid))


async def _one_imex_per_node_then_released(admin: AsyncClient, uid: str, cd: str) -> None:
    """The CD formed: one agent pod per node serves it (per domain; per clique none carries its
    label, the agents run the shared IMEX), one ``nvidia-imex`` per node. Then the workload and
    the CD are deleted: per domain no agent serves it and no IMEX is left; per clique the CD's
    channel annotations go and the shared IMEX keeps running, the same processes."""
    serving = await helpers.daemon_pods(admin, uid)
    on = [] if helpers.per_clique() else ["gb200-r0-n00", VICTIM]
    assert sorted(str(p.spec.nodeName) for p in serving if p.spec) == on
    assert all(names.CLIQUE_ID_LABEL in (p.metadata.labels or {}) for p in serving if p.metadata)
    # One nvidia-imex per node: the killed agent's child did not survive beside the new one's.
    imex = _imex_by_node()
    assert sorted(imex) == list(NODES) and all(len(p) == 1 for p in imex.values()), imex

    await admin.delete(Deployment, cd, namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, cd, namespace="default")

    async def released() -> bool:
        if helpers.per_clique():
            still = [n for n in NODES if await _taken_up(admin, uid, n)]
            return _imex_by_node() == imex and not still
        return not await helpers.daemon_pods(admin, uid) and not _imex_by_node()

    await _eventually(released, 120, "the CD released on every node")


def _plugin_pids(paths: state.SimPaths, node: str) -> list[int]:
    return [p for p, env in _processes(paths, "plugin run") if env.get("NODE_NAME") == node]


async def test_kill_9_of_a_plugin_mid_formation_still_converges_and_leaves_imex_alone(
    admin: AsyncClient,
    resident: state.SimPaths,  # noqa: F811  (the fixture imported above)
) -> None:
    """kill -9 of one node's kubelet plugin the moment it has begun the CD's prepare there (its
    Node names the CD): the kubelet restarts the plugin, the prepare is retried, and the CD
    converges Ready on indices 0 and 1 with one ``nvidia-imex`` per node. The agents are never
    restarted (their processes are the same): the plugin and the agent are separate
    (decision 0014), so a plugin's death never touches a node's IMEX."""

    async def agents_ready() -> bool:
        pods = await _agents(admin)
        return len(pods) == 2 and all(helpers.ready(p) for p in pods)

    await _eventually(agents_ready, 180, "an agent pod Ready on each node")
    agents = {node: _agent_pids(resident, node) for node in NODES}
    assert all(len(p) == 1 for p in agents.values()), agents
    (victim_pid,) = _plugin_pids(resident, VICTIM)
    uid = await helpers.create_cd(admin, PLUGIN_CD, num_nodes=2)
    await admin.create(helpers.workload_deployment(PLUGIN_CD, f"{PLUGIN_CD}-rct", 2))

    async def preparing() -> bool:
        found = await admin.get(Node, VICTIM)
        labels = found.metadata.labels or {}  # type: ignore[union-attr]
        return labels.get(names.COMPUTE_DOMAIN_LABEL) == uid or await _taken_up(admin, uid, VICTIM)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 180
    while not await preparing():
        assert loop.time() < deadline, "the victim's plugin never began the CD's prepare"
        await asyncio.sleep(0.05)
    was_ready = await _all_ready(admin, PLUGIN_CD) is not None
    os.kill(victim_pid, signal.SIGKILL)
    t0 = loop.time()

    async def converged() -> dict[str, int] | None:
        now = await _all_ready(admin, PLUGIN_CD)
        pids = _plugin_pids(resident, VICTIM)
        return now if now is not None and pids and victim_pid not in pids else None

    indices = await _eventually(converged, 180, "the CD Ready again after the plugin's kill -9")
    print(
        f"\nplugin on {VICTIM} killed (-9) mid-formation (CD Ready before: {was_ready}): "
        f"Ready after {loop.time() - t0:.1f}s"
    )
    assert sorted(indices.values()) == [0, 1], indices
    plugins = [
        p
        async for p in admin.list(
            Pod, namespace=DRIVER_NS, labels={"app.kubernetes.io/component": "kubelet-plugin"}
        )
        if p.spec and p.spec.nodeName == VICTIM
    ]
    assert len(plugins) == 1 and plugins[0].status and plugins[0].status.containerStatuses
    assert max(c.restartCount for c in plugins[0].status.containerStatuses) >= 1
    assert {node: _agent_pids(resident, node) for node in NODES} == agents, "an agent restarted"
    await _one_imex_per_node_then_released(admin, uid, PLUGIN_CD)
