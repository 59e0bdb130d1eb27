"""Failure drills with resident IMEX agents (``imex.agents=resident``, issue 26 points 1 and 4).

Deleting a node's agent pod while its CD's workload runs (the per-CD daemon pod's drill, with
the resident agent in its place): the CD goes NotReady with reason ``NodeNotReady`` and a
message naming that node; the agent DaemonSet (``OnDelete`` updates, but a deleted pod is still
recreated) brings a new agent pod on the node, which finds the CD again from the Node's label,
re-registers, and the CD is Ready again with every node on the index it had. The times from the
delete to NotReady and to Ready again are printed (``-s``) and recorded in docs/isolation.md.

A host ``nvidia-imex.service`` holding the node's IMEX session (upstream #524): the simulated
IMEX on one node refuses to start with ``NV_ERR_IN_USE`` while a ``session-in-use`` flag file
exists (its config, the per-CD template the agent renders, names the flag folder). The CD gets
a Warning ``ImexSessionInUse`` Event naming the node and the fix, from the agent (which may
create Events in the CD's namespace), and stays NotReady with a message naming the node and
the held session (the agent pod's ``compute-domains/imex-blocked`` annotation); once the flag
goes (the service is masked), the agent's next retry starts IMEX, the CD turns Ready and the
annotation goes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Node, Pod

from compute_domains.api import computedomain, names, sharedimex
from compute_domains.daemon import events, imexconfig
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_resident_agents import _agents, resident  # noqa: F401  (the fixture)
from tests.e2e.test_seed_example import _eventually as _eventually_slow

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
NODES_MODE = "virtual"
CD = "drill-cd"
VICTIM = "gb200-r0-n01"


async def _eventually(check: Any, timeout: float, what: str) -> Any:
    """``check`` until truthy, every 0.1 s (the drill's times are measured by these waits)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while loop.time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout:.0f}s (last: {last!r})")


def _ready_condition(st: dict[str, Any]) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), {})


async def _workloads(admin: AsyncClient, cd: str = CD) -> list[Pod]:
    pods = [p async for p in admin.list(Pod, namespace="default", labels={"job": cd})]
    return [p for p in pods if p.metadata is not None and not p.metadata.deletionTimestamp]


async def _all_ready(admin: AsyncClient, cd: str = CD) -> dict[str, int] | None:
    """node → index once ``cd`` is Ready with 2 Ready nodes and 2 running workload pods."""
    st = await helpers.cd_status(admin, cd)
    nodes = st.get("nodes") or []
    pods = await _workloads(admin, cd)
    if (
        st.get("status") == "Ready"
        and len(nodes) == 2
        and all(n["status"] == "Ready" for n in nodes)
        and len(pods) == 2
        and all(helpers.ready(p) for p in pods)
    ):
        return {n["name"]: n["index"] for n in nodes}
    return None


async def _serving(admin: AsyncClient, uid: str) -> list[Pod]:
    """The agent pods that run the CD's IMEX: those labelled for it (per domain), or in the
    per-clique scope every agent pod (each runs its node's share of the clique's IMEX)."""
    if helpers.per_clique():
        return await _agents(admin)
    return await helpers.daemon_pods(admin, uid)


async def test_deleting_a_nodes_agent_pod_goes_notready_then_ready_on_the_same_indices(
    admin: AsyncClient,
    resident: Any,  # noqa: F811  (the fixture imported above)
) -> None:
    async def agents_ready() -> list[Pod] | None:
        pods = await _agents(admin)
        return pods if len(pods) == 2 and all(helpers.ready(p) for p in pods) else None

    await _eventually_slow(agents_ready, 180, "an agent pod Ready on each node")
    uid = await helpers.create_cd(admin, CD, num_nodes=2)
    await admin.create(helpers.workload_deployment(CD, f"{CD}-rct", 2))
    indices = await _eventually_slow(lambda: _all_ready(admin), 300, "the CD Ready on 2 nodes")
    assert sorted(indices.values()) == [0, 1], indices
    workload_uids = {p.metadata.uid for p in await _workloads(admin) if p.metadata}

    (old,) = [p for p in await _serving(admin, uid) if p.spec and p.spec.nodeName == VICTIM]
    assert old.metadata is not None and old.metadata.name
    old_uid = old.metadata.uid
    assert (old.metadata.labels or {}).get("app.kubernetes.io/component") == "imex-agent"
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await admin.delete(Pod, old.metadata.name, namespace=DRIVER_NS)

    seen: dict[str, Any] = {}

    async def not_ready() -> bool:
        st = await helpers.cd_status(admin, CD)
        seen["last"] = st
        cond = _ready_condition(st)
        return st.get("status") == "NotReady" and cond.get("reason") == "NodeNotReady"

    await _eventually(not_ready, 120, "the CD NotReady with reason NodeNotReady")
    t_not_ready = loop.time() - t0
    message = _ready_condition(seen["last"]).get("message", "")
    assert VICTIM in message, message
    assert "gb200-r0-n00" not in message, message  # only the node that lost its agent

    async def healed() -> dict[str, int] | None:
        now = await _all_ready(admin)
        if now is None:
            return None
        serving = [p for p in await _serving(admin, uid) if p.spec and p.spec.nodeName == VICTIM]
        # A new agent pod (not the deleted one) serves the CD on the node.
        if len(serving) != 1 or serving[0].metadata is None or serving[0].metadata.uid == old_uid:
            return None
        return now

    after = await _eventually(healed, 120, "the CD Ready again with a new agent pod on the node")
    t_ready = loop.time() - t0
    print(
        f"\nagent pod deleted on {VICTIM}: NotReady after {t_not_ready:.1f}s, "
        f"Ready after {t_ready:.1f}s"
    )
    assert after == indices, f"indices moved: {indices} -> {after}"
    # The workload was not replaced: the drill is the agent's, the job kept running.
    assert {p.metadata.uid for p in await _workloads(admin) if p.metadata} == workload_uids
    agents = await _agents(admin)
    assert len(agents) == 2 and {p.spec.nodeName for p in agents if p.spec} == {
        "gb200-r0-n00",
        VICTIM,
    }
    # NVIDIA's selector finds exactly one pod per node for the CD (one IMEX per node); in the
    # per-clique scope none (the agents run the clique's shared IMEX, no CD label: 0015).
    serving = await helpers.daemon_pods(admin, uid)
    on = [] if helpers.per_clique() else ["gb200-r0-n00", VICTIM]
    assert sorted(str(p.spec.nodeName) for p in serving if p.spec) == on
    assert all(names.CLIQUE_ID_LABEL in (p.metadata.labels or {}) for p in serving if p.metadata)

    await admin.delete(Deployment, CD, namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, CD, namespace="default")

    async def released() -> bool:
        if helpers.per_clique():  # the CD's channel annotations gone from its nodes
            return not [
                n
                async for n in admin.list(Node)
                if uid in sharedimex.channels(n.metadata.annotations)  # type: ignore[union-attr]
            ]
        return not await helpers.daemon_pods(admin, uid)

    await _eventually_slow(released, 120, "no agent serving the CD any more")


async def test_a_host_imex_holding_the_session_is_reported_on_the_cd(
    admin: AsyncClient,
    resident: state.SimPaths,  # noqa: F811  (the fixture imported above)
) -> None:
    if helpers.per_clique():
        pytest.skip(
            "per-clique scope: no per-CD IMEX template exists (the node's one IMEX is the "
            "clique's shared IMEX, decision 0015); the held session in this scope is "
            "test_shared_imex_reports.py::test_a_held_session_is_told_on_every_cd_the_node_serves"
        )
    name = "inuse-cd"
    uid = await helpers.create_cd(admin, name, num_nodes=1)
    # The per-CD folder the agent will serve from, made before any claim: its IMEX template
    # names a flag folder, and the flag says "another nvidia-imex holds the session".
    folder = (
        resident.node_root(VICTIM) / "var/lib/kubelet/plugins/compute-domain.nvidia.com/domains"
    ) / uid
    (folder / "faults").mkdir(parents=True)
    (folder / "faults/session-in-use").touch()
    template = imexconfig.DEFAULT_TEMPLATE + f"SIM_FAULT_DIR=/domains/{uid}/faults\n"
    (folder / "imexd.cfg.tmpl").write_text(template)
    await admin.create(
        helpers.channel_pod("inuse", f"{name}-rct", node=VICTIM, command="sleep 3600")
    )

    async def reported() -> Event | None:
        found = [
            e
            async for e in admin.list(
                Event, namespace="default", fields={"involvedObject.name": name}
            )
            if e.reason == events.IMEX_SESSION_IN_USE
        ]
        return found[0] if found else None

    event = await _eventually_slow(reported, 120, "an ImexSessionInUse Event on the CD")
    assert event.type == "Warning"
    assert event.involvedObject.kind == "ComputeDomain" and event.involvedObject.uid == uid
    assert f"node {VICTIM}" in (event.message or "")
    assert "host nvidia-imex.service" in (event.message or "")
    assert "systemctl disable --now nvidia-imex.service" in (event.message or "")

    async def in_status() -> str:
        # The CD's status names the node and the cause (from the agent pod's annotation).
        st = await helpers.cd_status(admin, name)
        message = str(_ready_condition(st).get("message", ""))
        held = f"node {VICTIM}: nvidia-imex cannot start" in message and "held" in message
        return message if st.get("status") == "NotReady" and held else ""

    message = await _eventually_slow(in_status, 60, "the CD status naming the held session")
    assert "host nvidia-imex.service; disable and mask it" in message, message

    (folder / "faults/session-in-use").unlink()  # the operator masked the host service

    async def ready() -> bool:
        st = await helpers.cd_status(admin, name)
        return st.get("status") == "Ready" and await helpers.pod_ready(admin, "inuse")

    await _eventually_slow(ready, 120, "the CD Ready once the session is free")
    (agent,) = [p for p in await _agents(admin) if p.spec and p.spec.nodeName == VICTIM]
    assert names.IMEX_BLOCKED_ANNOTATION not in (agent.metadata.annotations or {})  # type: ignore[union-attr]
    await admin.delete(Pod, "inuse", namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, name, namespace="default")
