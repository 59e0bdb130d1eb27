"""A per-clique CD's status: its nodes from channel annotations, entries from shared registries."""

from __future__ import annotations

import json
from typing import Any

from compute_domains.api import agentpods, conditions, names, sharedimex
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import ComputeDomainStatus, Readiness
from compute_domains.controller import claims, sharedstatus, statuschange

C1, C2 = "cluster.1", "cluster.2"
R, N = Readiness.READY, Readiness.NOT_READY


def _registry(clique_id: str, *entries: tuple[str, str, Readiness]) -> ComputeDomainClique:
    """A shared registry as the agents leave it (no CD label; their own entries)."""
    clique = ComputeDomainClique.new(domain_uid="", clique_id=clique_id, namespace="ns")
    meta = clique.metadata
    meta.name = sharedimex.registry_name(clique_id)
    meta.labels = {names.CLIQUE_ID_LABEL: clique_id, sharedimex.SCOPE_LABEL: "perClique"}
    for node, ip, readiness in entries:
        clique = clique.with_registered(node, ip).with_status(node, readiness)
    return clique


def _served(*nodes: tuple[str, str], channel: int = 3) -> list[sharedstatus.Served]:
    return [sharedstatus.Served(name=n, clique_id=c, channel=channel) for n, c in nodes]


def _held(*nodes: str) -> list[claims.WorkloadClaim]:
    return [
        claims.WorkloadClaim(namespace="ns", name=f"c-{n}", node=n, pods=(f"w-{n}",)) for n in nodes
    ]


def _agents(registries: dict[str, ComputeDomainClique]) -> list[agentpods.AgentPod]:
    """A Ready agent pod behind every registry entry (with its IP): the agents are alive."""
    return [
        agentpods.AgentPod(
            name=f"agent-{d.node_name}", node_name=d.node_name, ip=d.ip_address, ready=True
        )
        for r in registries.values()
        for d in r.daemons
    ]


def _derive(**kw: Any) -> ComputeDomainStatus:
    kw.setdefault("num_nodes", 0)
    kw.setdefault("channels", {C1: 3})
    kw.setdefault("agents", _agents(kw.get("registries", {})))
    return sharedstatus.derive(**kw).status


def _ready(st: ComputeDomainStatus) -> tuple[str, str, str]:
    cond = st.condition(conditions.READY)
    assert cond is not None
    return cond.status, cond.reason, cond.message


def _summary(st: ComputeDomainStatus) -> dict[str, tuple[str, str, int, str]]:
    return {n.name: (n.ip_address, n.clique_id, n.index, n.status.value) for n in st.nodes}


def test_entries_are_the_nodes_entries_in_their_cliques_registry() -> None:
    """Only the annotated nodes are listed, with the registry's IP and index (node c of the
    same registry serves another CD only), and the channel is in the Ready message."""
    registry = _registry(C1, ("a", "10.0.0.1", R), ("c", "10.0.0.3", R), ("b", "10.0.0.2", R))
    st = _derive(
        served=_served(("a", C1), ("b", C1)),
        registries={C1: registry},
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
    )
    assert _summary(st) == {
        "a": ("10.0.0.1", C1, 0, "Ready"),
        "b": ("10.0.0.2", C1, 2, "Ready"),
    }
    assert st.status is R
    assert _ready(st) == (
        "True",
        "AllNodesReady",
        f"all 2 nodes Ready; IMEX channel 3 on clique {C1}",
    )


def test_an_annotated_node_without_a_registry_entry_is_not_ready_and_says_why() -> None:
    st = _derive(
        served=_served(("a", C1), ("b", C1)),
        registries={C1: _registry(C1, ("a", "10.0.0.1", R))},
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
    )
    assert _summary(st)["b"] == ("", C1, -1, "NotReady")
    status, reason, message = _ready(st)
    assert (status, reason) == ("False", "Forming")
    assert f"node b: its shared IMEX (clique {C1}) has not registered yet" in message
    none = _derive(
        served=_served(("a", C1)), registries={}, node_ready={"a": True}, workload=_held("a")
    )
    assert "has not registered yet" in _ready(none)[2]


def test_an_imex_crash_makes_the_member_not_ready() -> None:
    """The registry entry of a formed member turns NotReady: NodeNotReady, the node named."""
    served = _served(("a", C1), ("b", C1))
    formed = _derive(
        served=served,
        registries={C1: _registry(C1, ("a", "1", R), ("b", "2", R))},
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
    )
    registries = {C1: _registry(C1, ("a", "1", R), ("b", "2", N))}
    crashed = sharedstatus.derive(
        num_nodes=0,
        channels={C1: 3},
        served=served,
        registries=registries,
        node_ready={"a": True, "b": True},
        agents=_agents(registries),
        workload=_held("a", "b"),
        previous=formed,
    )
    assert _summary(crashed.status)["b"] == ("2", C1, 1, "NotReady")
    status, reason, message = _ready(crashed.status)
    assert (status, reason) == ("False", conditions.NODE_NOT_READY)
    assert f"node b: its shared IMEX (clique {C1}) is not Ready" in message
    (change,) = statuschange.transitions(formed, crashed)
    assert (change.node, change.kind) == ("b", "not-ready")


def test_a_node_holding_a_claim_before_its_prepare_is_listed_not_ready() -> None:
    st = _derive(
        served=[],
        registries={C1: _registry(C1, ("a", "1", R))},
        node_ready={"a": True},
        workload=_held("a"),
        node_cliques={"a": C1},
        channels={},
    )
    assert _summary(st) == {"a": ("", C1, -1, "NotReady")}
    status, reason, message = _ready(st)
    assert (status, reason) == ("False", "Forming")
    assert "no IMEX channel of this ComputeDomain on the node yet" in message
    assert "IMEX channel " not in message.replace("no IMEX channel of", "")


def test_a_down_node_that_holds_nothing_drops_out_and_a_down_member_stays() -> None:
    registries = {C1: _registry(C1, ("a", "1", R), ("b", "2", R))}
    st = _derive(
        served=_served(("a", C1), ("b", C1)),
        registries=registries,
        node_ready={"a": True, "b": False},
        workload=_held("a"),
    )
    assert set(_summary(st)) == {"a"}
    st = _derive(
        served=_served(("a", C1), ("b", C1)),
        registries=registries,
        node_ready={"a": True, "b": False},
        workload=_held("a", "b"),
    )
    assert _summary(st)["b"][3] == "NotReady"
    assert (
        _ready(st)[1] == conditions.NODE_NOT_READY
        and "node b: the node is NotReady" in _ready(st)[2]
    )


def test_a_full_registry_is_clique_full() -> None:
    registry = _registry(C1, ("x", "9", R), ("a", "1", R))
    st = _derive(
        served=_served(("a", C1), ("b", C1)),
        registries={C1: registry},
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
        max_nodes=2,
    )
    status, reason, message = _ready(st)
    assert (status, reason) == ("False", conditions.CLIQUE_FULL)
    assert f"node b cannot join clique {C1}" in message


def test_two_cliques_have_their_own_channels_in_the_message() -> None:
    st = _derive(
        served=[
            sharedstatus.Served(name="a", clique_id=C1, channel=3),
            sharedstatus.Served(name="b", clique_id=C2, channel=1),
        ],
        registries={C1: _registry(C1, ("a", "1", R)), C2: _registry(C2, ("b", "2", R))},
        channels={C1: 3, C2: 1},
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
    )
    assert _ready(st)[2].endswith(f"IMEX channels: 3 on clique {C1}, 1 on clique {C2}")
    assert {n.clique_id for n in st.nodes} == {C1, C2}


def test_peers_lost_in_the_registry_make_a_member_unreachable() -> None:
    registry = _registry(C1, ("a", "1", R), ("b", "2", R), ("c", "3", R))
    note = {"node": "a", "ip": "1", "lost": {"b": "2026-12-02T05:00:03Z"}}
    registry = registry.with_annotation(f"{names.LOST_PEERS_ANNOTATION_PREFIX}0", json.dumps(note))
    st = _derive(
        served=_served(("a", C1), ("b", C1)),
        registries={C1: registry},
        node_ready={"a": True, "b": True, "c": True},
        workload=_held("a", "b"),
    )
    assert _summary(st)["b"][3] == "NotReady"
    status, reason, message = _ready(st)
    assert (status, reason) == ("False", conditions.PEER_UNREACHABLE)
    assert "node b: its IMEX peers lost their links to it: a" in message


def test_a_refusal_wins_and_no_workload_never_says_nodes() -> None:
    st = _derive(
        served=[],
        registries={},
        node_ready={},
        refusal=("AllocationModeAllNotIsolated", "all channels would ..."),
        channels={},
    )
    assert _ready(st) == ("False", "AllocationModeAllNotIsolated", "all channels would ...")
    empty = _derive(served=[], registries={}, node_ready={}, channels={C1: 4})
    _status, reason, message = _ready(empty)
    assert reason == "NoWorkload" and "nodes" not in message
    assert message.endswith(f"IMEX channel 4 on clique {C1}")


def _blocked(registry: ComputeDomainClique, node: str, ip: str) -> ComputeDomainClique:
    entry = registry.daemon(node)
    assert entry is not None
    note = sharedimex.Blocked(
        reason="ImexSessionInUse", message="nvidia-imex cannot start: the session is held"
    )
    return registry.with_annotation(
        sharedimex.blocked_key(entry.index), sharedimex.blocked_value(node, ip, note)
    )


def test_a_blocked_shared_imex_is_named_on_every_cd_its_node_serves() -> None:
    """Node b's agent says its IMEX cannot start: CD X on {a, b} and CD Y on {b} both name it;
    CD Z on {a} does not."""
    registry = _blocked(_registry(C1, ("a", "1", R), ("b", "2", N)), "b", "2")
    for served in (_served(("a", C1), ("b", C1)), _served(("b", C1))):
        st = _derive(
            served=served,
            registries={C1: registry},
            node_ready={"a": True, "b": True},
            workload=_held(*(s.name for s in served)),
        )
        _status, _reason, message = _ready(st)
        assert "node b: nvidia-imex cannot start: the session is held" in message, message
        blocked = sharedstatus.blocked(served, {C1: registry})
        assert {n: b.reason for n, b in blocked.items()} == {"b": "ImexSessionInUse"}
    only_a = _served(("a", C1))
    st = _derive(
        served=only_a, registries={C1: registry}, node_ready={"a": True}, workload=_held("a")
    )
    assert st.status is R and sharedstatus.blocked(only_a, {C1: registry}) == {}


def test_a_blocked_note_of_an_earlier_agent_or_a_ready_entry_is_not_told() -> None:
    served = _served(("a", C1), ("b", C1))
    stale = _blocked(_registry(C1, ("a", "1", R), ("b", "9", N)), "b", "2")  # b's IP is now 9
    healed = _blocked(_registry(C1, ("a", "1", R), ("b", "2", R)), "b", "2")
    for registry in (stale, healed):
        assert sharedstatus.blocked(served, {C1: registry}) == {}
    st = _derive(
        served=served,
        registries={C1: stale},
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
    )
    assert f"node b: its shared IMEX (clique {C1}) is not Ready" in _ready(st)[2]


def test_a_peer_outside_the_cd_that_lost_a_node_does_not_count_in_it() -> None:
    """Judged as on a CD's own clique: c serves other CDs only, so its report of b counts in
    none of this CD's verdicts, while a's report of b makes b unreachable here."""
    registry = _registry(C1, ("a", "1", R), ("b", "2", R), ("c", "3", R))
    by_c = {"node": "c", "ip": "3", "lost": {"b": "2026-12-02T05:00:03Z"}}
    told = registry.with_annotation(f"{names.LOST_PEERS_ANNOTATION_PREFIX}2", json.dumps(by_c))
    kw: dict[str, Any] = {
        "served": _served(("a", C1), ("b", C1)),
        "node_ready": {"a": True, "b": True, "c": True},
        "workload": _held("a", "b"),
    }
    assert _derive(registries={C1: told}, **kw).status is R
    by_a = {"node": "a", "ip": "1", "lost": {"b": "2026-12-02T05:00:04Z"}}
    both = told.with_annotation(f"{names.LOST_PEERS_ANNOTATION_PREFIX}0", json.dumps(by_a))
    st = _derive(registries={C1: both}, **kw)
    status, reason, message = _ready(st)
    assert (status, reason) == ("False", conditions.PEER_UNREACHABLE)
    assert (
        "node b: its IMEX peers lost their links to it: a (since 2026-12-02T05:00:04Z)" in message
    )


def _agent(node: str, ip: str, *, ready: bool, restarts: int = 0) -> agentpods.AgentPod:
    return agentpods.AgentPod(
        name=f"agent-{node}", node_name=node, ip=ip, ready=ready, restarts=restarts
    )


def test_a_ready_entry_whose_agent_pod_is_not_ready_is_not_counted() -> None:
    """Issue 26, defect 3: ``kill -9`` of b's agent takes its shared IMEX (its child) but leaves
    its registry entry Ready until the restarted agent registers; the kubelet marks the pod
    NotReady at once. The entry is NotReady, the CD NodeNotReady naming b's agent; once the
    pod is Ready again with the same IP, the CD is Ready again on the same indices."""
    served = _served(("a", C1), ("b", C1))
    registries = {C1: _registry(C1, ("a", "1", R), ("b", "2", R))}
    common: dict[str, Any] = {
        "served": served,
        "registries": registries,
        "node_ready": {"a": True, "b": True},
        "workload": _held("a", "b"),
    }
    formed = _derive(**common, agents=[_agent("a", "1", ready=True), _agent("b", "2", ready=True)])
    assert formed.status is R
    killed = _derive(
        **common,
        agents=[_agent("a", "1", ready=True), _agent("b", "2", ready=False, restarts=1)],
        previous=formed,
    )
    assert killed.status is N
    assert _summary(killed)["b"] == ("2", C1, 1, "NotReady")
    assert _summary(killed)["a"] == ("1", C1, 0, "Ready")
    status, reason, message = _ready(killed)
    assert (status, reason) == ("False", conditions.NODE_NOT_READY)
    assert "node b: its IMEX agent is not Ready (restart 1; its shared IMEX went with it)" in (
        message
    )
    back = _derive(
        **common,
        agents=[_agent("a", "1", ready=True), _agent("b", "2", ready=True, restarts=1)],
        previous=killed,
    )
    assert back.status is R and _summary(back) == _summary(formed)


def test_an_entry_needs_an_agent_pod_with_its_ip() -> None:
    """No agent pod on the node, or one with another IP (a new pod that has not registered
    yet): the entry is not counted, whatever it says; the reason names what is missing."""
    served = _served(("a", C1))
    registries = {C1: _registry(C1, ("a", "1", R))}
    common: dict[str, Any] = {
        "served": served,
        "registries": registries,
        "node_ready": {"a": True},
        "workload": _held("a"),
    }
    gone = _derive(**common, agents=[_agent("b", "1", ready=True)])  # another node's pod
    assert gone.status is N
    assert "node a: its IMEX agent pod is gone (its shared IMEX went with it)" in _ready(gone)[2]
    moved = _derive(**common, agents=[_agent("a", "9", ready=True)])
    assert moved.status is N
    assert "does not have the registry entry's IP 1" in _ready(moved)[2]
    starting = _derive(**common, agents=[_agent("a", "1", ready=False)])
    assert _ready(starting)[1] == "Forming"
    assert (
        "node a: its IMEX agent is not Ready (its shared IMEX goes with it)"
        in (_ready(starting)[2])
    )
