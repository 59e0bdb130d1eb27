"""Which status writes may wait (``statuschange.urgent``) and which node changes one Event tells
(``statuschange.grouped``): issue 17 point 3, fewer writes with nothing lost."""

from __future__ import annotations

from compute_domains.api import conditions
from compute_domains.api.computedomain import ComputeDomainNode, ComputeDomainStatus, Readiness
from compute_domains.controller import statuschange

R, N = Readiness.READY, Readiness.NOT_READY
CLIQUE = "c0ffee00-0000-0000-0000-000000000001.7"


def _node(name: str, st: Readiness = N, index: int = -1, clique: str = CLIQUE) -> ComputeDomainNode:
    return ComputeDomainNode(
        name=name, ip_address="10.0.0.1", clique_id=clique, index=index, status=st
    )


def _forming(message: str = "", generation: int = 1) -> conditions.Condition:
    return conditions.Condition(
        type="Ready",
        status="False",
        reason="Forming",
        message=message,
        observed_generation=generation,
    )


def _status(
    *nodes: ComputeDomainNode, cond: conditions.Condition | None = None
) -> ComputeDomainStatus:
    ready = all(n.status is R for n in nodes) and bool(nodes)
    return ComputeDomainStatus(
        status=R if ready else N, nodes=nodes, conditions=(cond or _forming(),)
    )


def test_progress_of_a_forming_domain_may_wait() -> None:
    before = _status(_node("a"), _node("b"), cond=_forming("0 of 2"))
    # An entry got its index, turned Ready, a new one appeared, the message counts on.
    after = _status(_node("a", R, 0), _node("b", N, 1), _node("c"), cond=_forming("1 of 3"))
    assert not statuschange.urgent(before, after)


def test_a_verdict_change_is_written_at_once() -> None:
    forming = _status(_node("a", R, 0), _node("b", N, 1))
    assert statuschange.urgent(None, forming), "the first status"
    ready = conditions.Condition(type="Ready", status="True", reason="AllNodesReady")
    assert statuschange.urgent(forming, _status(_node("a", R, 0), _node("b", R, 1), cond=ready))
    lost = conditions.Condition(type="Ready", status="False", reason="NodeNotReady")
    assert statuschange.urgent(forming, _status(_node("a", R, 0), _node("b", N, 1), cond=lost))
    assert statuschange.urgent(
        forming, _status(_node("a", R, 0), _node("b", N, 1), cond=_forming(generation=2))
    )
    deleting = conditions.Condition(type="Deleting", status="True", reason="WaitingForWorkload")
    with_deleting = ComputeDomainStatus(
        status=N, nodes=forming.nodes, conditions=(*forming.conditions, deleting)
    )
    assert statuschange.urgent(forming, with_deleting)


def test_a_ready_member_turning_not_ready_is_written_at_once() -> None:
    # Same condition (still Forming: another node never was Ready), but a, Ready, is lost.
    before = _status(_node("a", R, 0), _node("b", N, 1))
    after = _status(_node("a", N, 0), _node("b", N, 1))
    assert statuschange.urgent(before, after)


def test_joins_at_one_place_are_one_event_not_ready_stays_per_node() -> None:
    changes = [
        statuschange.Transition(node="a", kind="joined", entry=_node("a")),
        statuschange.Transition(node="b", kind="joined", entry=_node("b")),
        statuschange.Transition(node="c", kind="joined", entry=_node("c", index=2)),
        statuschange.Transition(node="d", kind="left", entry=_node("d")),
        statuschange.Transition(node="e", kind="left", entry=_node("e", index=4)),
        statuschange.Transition(node="f", kind="not-ready", entry=_node("f"), why="x"),
        statuschange.Transition(node="g", kind="not-ready", entry=_node("g"), why="y"),
    ]
    groups = statuschange.grouped(changes)
    assert [[c.node for c in g] for g in groups] == [["a", "b"], ["c"], ["d", "e"], ["f"], ["g"]]
    assert statuschange.where(_node("a")) == f"clique {CLIQUE!r}, no slot yet"
    assert statuschange.where(_node("c", index=2)) == f"clique {CLIQUE!r}, index 2"
    assert statuschange.where(_node("x", clique="")) == "no clique"
