"""No message crosses IMEX domains (issue 26 point 5, upstream #1447), with resident agents.

A resident agent keeps its pod, so its IP, from one ComputeDomain to the next: the IMEX a new CD
starts on a node listens exactly where the previous CD's IMEX on that node listened. Three nodes:

1. CD A forms on n0 (index 0) and n1 (index 1), one workload pod each. n1's hosts file (its
   agent pod's ``/etc/hosts``) maps A's name of node 0 to n0's agent IP.
2. A's pod on n0 goes: n0's agent stops A's IMEX; n1's hosts block now points A's node 0 at the
   unfilled-slot sentinel 127.0.0.2.
3. CD B forms on n0 (index 0, the same agent IP) and n2 (index 1). Its ``nodes.cfg`` and hosts
   block use B's names, which are not A's.
4. n1's hosts file gets its step-1 text back: a view of A's peers that lags behind the cluster,
   the condition #1447 names (there, a stale mapping under pod-IP churn). Our daemon rewrites
   the file on every change it sees, so only a lag opens the window this test holds open.
5. A's pod on n1 goes: A's IMEX there stops and sends its shutdown message to every peer address
   it has, n0's among them, where B's IMEX now listens.

B's IMEX on n0 must drop it as another domain's (its log says so) and B stays Ready with its link
to its node 1 untouched. With NVIDIA's names (no per-domain infix: the same ``nodes.cfg`` in every
CD) B's IMEX takes the message for one from its own node 1, logs "Received notification of
shutdown from node 1" and drops its link to n2, which never stopped: run once so (the infix
forced empty) to see this test fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.api import computedomain, names
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_resident_agents import _agents, resident  # noqa: F401  (the fixture)
from tests.e2e.test_seed_example import _eventually

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=3)
NODES_MODE = "virtual"
N0, N1, N2 = (topology.node_name(0, i) for i in range(3))
SENTINEL = names.IMEX_UNFILLED_SLOT_ADDRESS
STOPPED_A = "stopped serving CD default/cd-a"
DROPPED = "Dropped a shutdown message from node 1"
TAKEN = "Received notification of shutdown from node"


def _hosts(sim: state.SimPaths, agent: Pod) -> Path:
    """The agent pod's ``/etc/hosts`` on its node (the file its daemons and IMEX use)."""
    assert agent.spec is not None and agent.metadata is not None
    pods = sim.node_root(str(agent.spec.nodeName)) / "var/lib/kubelet/pods"
    return pods / str(agent.metadata.uid) / "etc-hosts"


def _nodes_cfg(sim: state.SimPaths, node: str, uid: str) -> str:
    domains = sim.node_root(node) / "var/lib/kubelet/plugins/compute-domain.nvidia.com/domains"
    found = [p for p in domains.glob("*/nodes.cfg") if uid in str(p)]
    assert len(found) == 1, (uid, sorted(domains.glob("*/nodes.cfg")))
    return found[0].read_text()


def _maps(text: str, address: str, name: str) -> bool:
    return f"{address}\t{name}" in text.splitlines()


async def _indices(admin: AsyncClient, cd: str) -> dict[str, int]:
    return {n["name"]: n["index"] for n in (await helpers.cd_status(admin, cd)).get("nodes") or []}


async def _ready(admin: AsyncClient, cd: str, pods: tuple[str, ...]) -> bool:
    st = await helpers.cd_status(admin, cd)
    nodes = st.get("nodes") or []
    running = [await helpers.pod_ready(admin, p) for p in pods]
    return (
        st.get("status") == "Ready"
        and len(nodes) == len(pods)
        and all(n["status"] == "Ready" for n in nodes)
        and all(running)
    )


async def _log(admin: AsyncClient, agent: Pod) -> str:
    assert agent.metadata is not None
    return await helpers.log_of(admin, str(agent.metadata.name), namespace=DRIVER_NS)


async def _serves(admin: AsyncClient, node: str, uid: str | None) -> bool:
    (agent,) = [p for p in await _agents(admin) if p.spec is not None and p.spec.nodeName == node]
    assert agent.metadata is not None
    return (agent.metadata.labels or {}).get(names.COMPUTE_DOMAIN_LABEL) == uid


async def _has_index(admin: AsyncClient, cd: str, node: str, index: int) -> bool:
    return (await _indices(admin, cd)).get(node) == index


async def _not_serving(admin: AsyncClient, node: str) -> bool:
    return await _serves(admin, node, None)


async def _place(admin: AsyncClient, pod: str, cd: str, node: str) -> None:
    await admin.create(helpers.channel_pod(pod, f"{cd}-rct", node=node, command="sleep 3600"))


async def test_an_old_domains_shutdown_never_reaches_a_new_domain_on_a_reused_address(
    admin: AsyncClient,
    resident: state.SimPaths,  # noqa: F811  (the fixture imported above)
) -> None:
    async def agents_ready() -> dict[str, Pod] | None:
        pods = await _agents(admin)
        if len(pods) != 3 or not all(helpers.ready(p) for p in pods):
            return None
        return {str(p.spec.nodeName): p for p in pods if p.spec is not None}

    if helpers.per_clique():
        pytest.skip(
            "per-clique scope: a CD starts and stops no IMEX of its own (the clique's shared "
            "IMEX runs for good, decision 0015), so no CD's IMEX domain shuts down at an "
            "address another CD's IMEX then takes; the shared domain's names carry the "
            "clique's infix (decision 0016)"
        )
    agents = await _eventually(agents_ready, 180, "an agent pod Ready on each node")
    ip = {node: str(pod.status.podIP) for node, pod in agents.items() if pod.status is not None}

    # 1. A on n0 (index 0) then n1 (index 1).
    uid_a = await helpers.create_cd(admin, "cd-a", num_nodes=2)
    await _place(admin, "a0", "cd-a", N0)
    await _eventually(lambda: _has_index(admin, "cd-a", N0, 0), 180, "A's n0 registered at index 0")
    await _place(admin, "a1", "cd-a", N1)
    await _eventually(lambda: _ready(admin, "cd-a", ("a0", "a1")), 300, "A Ready on n0 and n1")
    assert await _indices(admin, "cd-a") == {N0: 0, N1: 1}
    a_name0 = names.imex_dns_name(0, uid_a)
    a_nodes = _nodes_cfg(resident, N1, uid_a)
    assert a_nodes.startswith(f"{a_name0}\n")
    n1_hosts = _hosts(resident, agents[N1])
    seen_formed = n1_hosts.read_text()
    assert _maps(seen_formed, ip[N0], a_name0), seen_formed

    # 2. A's workload on n0 goes; n1's view of A follows (n0's slot: the sentinel).
    await admin.delete(Pod, "a0", namespace="default")
    await _eventually(lambda: _not_serving(admin, N0), 180, "n0's agent serving no CD")

    async def forgotten() -> bool:
        return _maps(n1_hosts.read_text(), SENTINEL, a_name0)

    await _eventually(forgotten, 120, f"n1's hosts block pointing A's node 0 at {SENTINEL}")

    # 3. B on n0 (the same agent, the same IP, index 0) then n2 (index 1).
    uid_b = await helpers.create_cd(admin, "cd-b", num_nodes=2)
    await _place(admin, "b0", "cd-b", N0)
    await _eventually(lambda: _has_index(admin, "cd-b", N0, 0), 180, "B's n0 registered at index 0")
    await _place(admin, "b2", "cd-b", N2)
    await _eventually(lambda: _ready(admin, "cd-b", ("b0", "b2")), 300, "B Ready on n0 and n2")
    st = await helpers.cd_status(admin, "cd-b")
    assert {n["name"]: n["ipAddress"] for n in st["nodes"]}[N0] == ip[N0]  # the address reused
    b_nodes = _nodes_cfg(resident, N0, uid_b)
    assert b_nodes.startswith(f"{names.imex_dns_name(0, uid_b)}\n")
    n0_hosts = _hosts(resident, agents[N0]).read_text()
    assert _maps(n0_hosts, ip[N2], names.imex_dns_name(1, uid_b)), n0_hosts
    assert _maps(n0_hosts, SENTINEL, names.imex_dns_name(17, uid_b)), n0_hosts

    # 4. n1's IMEX sees A's old peers again (the lag), 5. then A's last node stops.
    n1_hosts.write_text(seen_formed)
    n0_before = len(await _log(admin, agents[N0]))
    n1_before = len(await _log(admin, agents[N1]))
    await admin.delete(Pod, "a1", namespace="default")

    async def a_stopped() -> bool:
        return STOPPED_A in (await _log(admin, agents[N1]))[n1_before:]

    # The agent says so once A's daemon, and so its IMEX, has stopped: its notices are sent.
    await _eventually(a_stopped, 180, "n1's agent done with A (its IMEX stopped)")

    async def b_heard() -> str | None:
        text = (await _log(admin, agents[N0]))[n0_before:]
        return text if DROPPED in text or TAKEN in text else None

    heard = await _eventually(b_heard, 60, "B's IMEX on n0 getting A's shutdown message")
    assert TAKEN not in heard, heard
    assert f"{DROPPED} ({ip[N1]}) of another IMEX domain" in heard, heard
    assert "Node disconnect event detected" not in heard, heard
    assert await _ready(admin, "cd-b", ("b0", "b2"))
    # Why: the two domains' node maps share no name (NVIDIA's names: all 18 the same).
    assert not set(b_nodes.split()) & set(a_nodes.split())

    for pod in ("b0", "b2"):
        await admin.delete(Pod, pod, namespace="default")
    for cd in ("cd-a", "cd-b"):
        await admin.delete(computedomain.ComputeDomainResource, cd, namespace="default")

    async def cleaned() -> bool:
        return not await helpers.daemon_pods(admin, None)

    await _eventually(cleaned, 180, "no agent serving a CD")
