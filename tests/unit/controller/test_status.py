"""Pure status derivation: entries from cliques, pods and claims, the verdict, pruning, events."""

from __future__ import annotations

from typing import Any

import pytest

from compute_domains.api import conditions
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import ComputeDomainNode, ComputeDomainStatus, Readiness
from compute_domains.controller import claims, status, statuschange, verdict

UID = "cd-uid"
C1, C2 = "cluster.1", "cluster.2"
R, N = Readiness.READY, Readiness.NOT_READY


def _clique(clique_id: str, *entries: tuple[str, str, Readiness]) -> ComputeDomainClique:
    clique = ComputeDomainClique.new(domain_uid=UID, clique_id=clique_id, namespace="ns")
    for node, ip, readiness in entries:
        clique = clique.with_registered(node, ip).with_status(node, readiness)
    return clique


def _pod(node: str, ip: str, *, ready: bool = True, clique: str | None = C1) -> status.DaemonPod:
    return status.DaemonPod(name=f"p-{node}", node_name=node, ip=ip, ready=ready, clique_id=clique)


def _summary(st: ComputeDomainStatus) -> dict[str, tuple[str, int, str]]:
    return {n.name: (n.clique_id, n.index, n.status.value) for n in st.nodes}


def _held(*nodes: str) -> list[claims.WorkloadClaim]:
    return [
        claims.WorkloadClaim(namespace="ns", name=f"c-{n}", node=n, pods=(f"w-{n}",)) for n in nodes
    ]


def _derive(**kw: Any) -> status.Derived:
    kw.setdefault("num_nodes", 0)
    return status.derive(**kw)


def _ready_condition(st: ComputeDomainStatus) -> tuple[str, str, str]:
    cond = st.condition(conditions.READY)
    assert cond is not None
    return cond.status, cond.reason, cond.message


CASES: list[tuple[str, dict[str, Any], str, dict[str, tuple[str, int, str]]]] = [
    ("empty", {"cliques": [], "pods": [], "ready": {}}, "NotReady", {}),
    (
        "all-ready",
        {
            "cliques": [_clique(C1, ("a", "1", R), ("b", "2", R))],
            "pods": [_pod("a", "1"), _pod("b", "2")],
            "ready": {"a": True, "b": True},
            "held": ["a", "b"],
        },
        "Ready",
        {"a": (C1, 0, "Ready"), "b": (C1, 1, "Ready")},
    ),
    (
        "clique-not-ready",
        {
            "cliques": [_clique(C1, ("a", "1", N))],
            "pods": [_pod("a", "1")],
            "ready": {"a": True},
            "held": ["a"],
        },
        "NotReady",
        {"a": (C1, 0, "NotReady")},
    ),
    (
        "pod-not-ready",
        {
            "cliques": [_clique(C1, ("a", "1", R))],
            "pods": [_pod("a", "1", ready=False)],
            "ready": {"a": True},
            "held": ["a"],
        },
        "NotReady",
        {"a": (C1, 0, "NotReady")},
    ),
    (
        "node-not-ready",
        {
            "cliques": [_clique(C1, ("a", "1", R))],
            "pods": [_pod("a", "1")],
            "ready": {"a": False},
            "held": ["a"],
        },
        "NotReady",
        {"a": (C1, 0, "NotReady")},
    ),
    (
        "node-deleted",
        {
            "cliques": [_clique(C1, ("a", "1", R))],
            "pods": [_pod("a", "1")],
            "ready": {},
            "held": ["a"],
        },
        "NotReady",
        {"a": (C1, 0, "NotReady")},
    ),
    (
        "pod-gone-without-workload-drops-the-entry",
        {
            "cliques": [_clique(C1, ("a", "1", R), ("b", "2", R))],
            "pods": [_pod("b", "2")],
            "ready": {"a": True, "b": True},
            "held": ["b"],
        },
        "Ready",
        {"b": (C1, 1, "Ready")},
    ),
    (
        "pod-gone-with-workload-keeps-a-not-ready-entry",
        {
            "cliques": [_clique(C1, ("a", "1", R), ("b", "2", R))],
            "pods": [_pod("b", "2")],
            "ready": {"a": True, "b": True},
            "held": ["a", "b"],
        },
        "NotReady",
        {"a": ("", -1, "NotReady"), "b": (C1, 1, "Ready")},
    ),
    (
        "two-cliques-and-non-fabric",
        {
            "cliques": [_clique(C2, ("c", "3", R)), _clique(C1, ("a", "1", R))],
            "pods": [_pod("a", "1"), _pod("c", "3", clique=C2), _pod("p", "9", clique="")],
            "ready": {"a": True, "c": True, "p": True},
            "held": ["a", "c", "p"],
        },
        "Ready",
        {"a": (C1, 0, "Ready"), "c": (C2, 0, "Ready"), "p": ("", -1, "Ready")},
    ),
    (
        "non-fabric-pod-not-ready",
        {
            "cliques": [],
            "pods": [_pod("p", "9", ready=False, clique="")],
            "ready": {"p": True},
            "held": ["p"],
        },
        "NotReady",
        {"p": ("", -1, "NotReady")},
    ),
    (
        "unlabelled-pod-is-not-an-entry",
        {"cliques": [], "pods": [_pod("x", "9", clique=None)], "ready": {"x": True}},
        "NotReady",
        {},
    ),
    (
        "node-listed-twice-keeps-first",
        {
            "cliques": [_clique(C1, ("a", "1", R)), _clique(C2, ("a", "1", N))],
            "pods": [_pod("a", "1")],
            "ready": {"a": True},
            "held": ["a"],
        },
        "Ready",
        {"a": (C1, 0, "Ready")},
    ),
    (
        "ready-entries-without-workload-are-not-ready",
        {"cliques": [_clique(C1, ("a", "1", R))], "pods": [_pod("a", "1")], "ready": {"a": True}},
        "NotReady",
        {"a": (C1, 0, "Ready")},
    ),
]


@pytest.mark.parametrize(("case", "inputs", "overall", "entries"), CASES, ids=[c[0] for c in CASES])
def test_derive(
    case: str, inputs: dict[str, Any], overall: str, entries: dict[str, tuple[str, int, str]]
) -> None:
    st = _derive(
        cliques=inputs["cliques"],
        pods=inputs["pods"],
        node_ready=inputs["ready"],
        workload=_held(*inputs.get("held", ())),
    ).status
    assert st.status.value == overall
    assert _summary(st) == entries
    cond = st.condition(conditions.READY)
    assert cond is not None and cond.true == (overall == "Ready")


def test_num_nodes_holds_status_until_enough_entries() -> None:
    inputs: dict[str, Any] = {
        "cliques": [_clique(C1, ("a", "1", R))],
        "pods": [_pod("a", "1")],
        "node_ready": {"a": True},
        "workload": _held("a"),
    }
    two = _derive(**{**inputs, "num_nodes": 2}).status
    assert two.status is Readiness.NOT_READY
    assert _ready_condition(two) == (
        "False",
        "Forming",
        "1 of 1 nodes Ready; 1 of 2 nodes (numNodes) listed: 1 hold a workload claim, 0 are warm "
        "spares or daemons whose workload left; IMEX daemons run only on nodes where a pod's "
        "claim of this ComputeDomain is placed, or that its compute-domains/warm-nodes annotation "
        "selects (warm spares)",
    )
    one = _derive(**{**inputs, "num_nodes": 1}).status
    assert one.status is Readiness.READY
    assert _ready_condition(one) == ("True", "AllNodesReady", "all 1 nodes Ready")


def test_no_workload_is_not_ready_whatever_num_nodes_says() -> None:
    for num_nodes in (0, 1):
        st = _derive(num_nodes=num_nodes, cliques=[], pods=[], node_ready={}).status
        assert st.status is Readiness.NOT_READY
        state, reason, message = _ready_condition(st)
        assert (state, reason) == ("False", "NoWorkload")
        assert "no workload claim" in message
    # An unallocated claim holds no node yet.
    pending = [claims.WorkloadClaim(namespace="ns", name="c", node="", pods=("w",))]
    st = _derive(cliques=[], pods=[], node_ready={}, workload=pending).status
    assert _ready_condition(st)[1] == "NoWorkload"


def test_a_node_waiting_for_its_daemon_is_listed_and_forming() -> None:
    st = _derive(
        cliques=[_clique(C1, ("a", "1", R))],
        pods=[_pod("a", "1")],
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
        node_cliques={"b": C1},
    ).status
    assert _summary(st) == {"a": (C1, 0, "Ready"), "b": (C1, -1, "NotReady")}
    assert st.node("b").ip_address == ""  # type: ignore[union-attr]
    assert _ready_condition(st) == (
        "False",
        "Forming",
        "1 of 2 nodes Ready; waiting for node b: waiting for its IMEX daemon pod",
    )
    # Its daemon pod is there but has not registered in its clique yet.
    st = _derive(
        cliques=[_clique(C1, ("a", "1", R))],
        pods=[_pod("a", "1"), _pod("b", "2", ready=False)],
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
    ).status
    assert _summary(st)["b"] == (C1, -1, "NotReady")
    assert _ready_condition(st)[2].endswith("node b: its IMEX daemon has not registered yet")


def test_a_member_whose_daemon_is_gone_stays_listed_until_its_workload_leaves() -> None:
    formed = _derive(
        cliques=[_clique(C1, ("a", "1", R), ("b", "2", R))],
        pods=[_pod("a", "1"), _pod("b", "2")],
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
    )
    assert formed.status.status is Readiness.READY
    # b's daemon pod is gone and its clique entry pruned: b keeps its entry, NotReady.
    gone = _derive(
        cliques=[_clique(C1, ("a", "1", R))],
        pods=[_pod("a", "1")],
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
        previous=formed.status,
    )
    assert _summary(gone.status) == {"a": (C1, 0, "Ready"), "b": (C1, 1, "NotReady")}
    assert gone.status.node("b").ip_address == "2"  # type: ignore[union-attr]
    assert _ready_condition(gone.status) == (
        "False",
        "NodeNotReady",
        "1 of 2 nodes Ready; node b: its IMEX daemon pod is gone",
    )
    # A new daemon pod starts there: still a member coming back, not a forming node.
    back = _derive(
        cliques=[_clique(C1, ("a", "1", R))],
        pods=[_pod("a", "1"), _pod("b", "3", ready=False)],
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
        previous=gone.status,
    )
    assert _ready_condition(back.status)[1] == "NodeNotReady"
    # Its workload leaves: the entry goes, the domain is Ready again.
    left = _derive(
        cliques=[_clique(C1, ("a", "1", R))],
        pods=[_pod("a", "1")],
        node_ready={"a": True, "b": True},
        workload=_held("a"),
        previous=back.status,
    )
    assert _summary(left.status) == {"a": (C1, 0, "Ready")}
    assert left.status.status is Readiness.READY


def test_a_restarting_daemon_makes_its_node_not_ready() -> None:
    restarted = status.DaemonPod(
        name="p-a", node_name="a", ip="1", ready=False, clique_id=C1, restarts=1
    )
    st = _derive(
        cliques=[_clique(C1, ("a", "1", R))],
        pods=[restarted],
        node_ready={"a": True},
        workload=_held("a"),
    ).status
    assert _ready_condition(st) == (
        "False",
        "NodeNotReady",
        "0 of 1 nodes Ready; node a: its IMEX daemon is restarting (restart 1)",
    )


def test_a_daemon_whose_imex_cannot_start_says_why_for_its_node() -> None:
    blocked = status.DaemonPod(
        name="p-a", node_name="a", ip="1", ready=False, clique_id=C1, blocked="the session is held"
    )
    st = _derive(
        cliques=[_clique(C1, ("a", "1", "NotReady"))],
        pods=[blocked],
        node_ready={"a": True},
        workload=_held("a"),
    ).status
    assert _ready_condition(st) == (
        "False",
        "Forming",
        "0 of 1 nodes Ready; waiting for node a: the session is held",
    )


def test_a_full_clique_names_the_node_that_cannot_join() -> None:
    st = _derive(
        cliques=[_clique(C1, ("a", "1", R))],
        pods=[_pod("a", "1"), _pod("b", "2", ready=False)],
        node_ready={"a": True, "b": True},
        workload=_held("a", "b"),
        max_nodes=1,
    ).status
    assert _summary(st) == {"a": (C1, 0, "Ready"), "b": (C1, -1, "NotReady")}
    assert _ready_condition(st) == (
        "False",
        "CliqueFull",
        f"node b cannot join clique {C1}: it is full (1 of 1 slots, maxNodesPerIMEXDomain)",
    )


def test_a_template_conflict_wins_over_everything() -> None:
    st = _derive(
        cliques=[_clique(C1, ("a", "1", R))],
        pods=[_pod("a", "1")],
        node_ready={"a": True},
        workload=_held("a"),
        template_conflict="ResourceClaimTemplate ns/t already exists",
    ).status
    assert st.status is Readiness.NOT_READY
    assert _ready_condition(st) == (
        "False",
        "TemplateConflict",
        "ResourceClaimTemplate ns/t already exists",
    )


def test_a_waiting_deletion_names_the_pods() -> None:
    st = _derive(
        cliques=[],
        pods=[],
        node_ready={},
        waited_for=["ns/w-0", "ns/w-1"],
        generation=3,
    ).status
    cond = st.condition(conditions.DELETING)
    assert cond is not None and cond.true and cond.reason == "WaitingForWorkload"
    assert "2 pod(s)" in cond.message and "ns/w-0, ns/w-1" in cond.message
    assert cond.observed_generation == 3
    assert _derive(cliques=[], pods=[], node_ready={}).status.condition("Deleting") is None


def test_indices_are_copied_never_reassigned() -> None:
    clique = _clique(C1, ("a", "1", R), ("b", "2", R), ("c", "3", R)).retaining_nodes(["a", "c"])
    st = _derive(
        cliques=[clique],
        pods=[_pod("a", "1"), _pod("c", "3")],
        node_ready={"a": True, "c": True},
        workload=_held("a", "c"),
    ).status
    assert [(n.name, n.index) for n in st.nodes] == [("a", 0), ("c", 2)]


def test_stale_and_full_cliques() -> None:
    clique = _clique(C1, ("a", "1", R), ("b", "2", R))
    assert status.stale_clique_nodes(clique, {"b"}) == ["a"]
    pods = [_pod("a", "1"), _pod("b", "2"), _pod("z", "26"), _pod("y", "25", clique=C2)]
    assert status.full_clique_nodes([clique], pods, max_nodes=2) == [("z", C1)]
    assert status.full_clique_nodes([clique], pods, max_nodes=3) == []


def test_differs_ignores_list_order_but_not_content() -> None:
    a = ComputeDomainNode(name="a", ip_address="1", clique_id=C1, index=0, status=R)
    b = ComputeDomainNode(name="b", ip_address="2", clique_id=C1, index=1, status=R)
    ready = conditions.Condition(type="Ready", status="True", reason="AllNodesReady")
    deleting = conditions.Condition(type="Deleting", status="True", reason="WaitingForWorkload")
    desired = ComputeDomainStatus(status=R, nodes=(a, b), conditions=(ready, deleting))
    stored = desired.to_dict()
    stored["nodes"] = list(reversed(stored["nodes"]))
    stored["conditions"] = list(reversed(stored["conditions"]))
    assert not statuschange.differs(stored, desired)
    assert statuschange.differs(None, desired)
    assert statuschange.differs({**stored, "readyNodes": None}, desired)
    stored["conditions"][0]["message"] = "changed"
    assert statuschange.differs(stored, desired)
    stored = desired.to_dict()
    stored["nodes"][0]["status"] = "NotReady"
    assert statuschange.differs(stored, desired)


def test_conditions_keep_their_transition_time_while_the_status_holds() -> None:
    old = (
        conditions.Condition(
            type="Ready", status="False", reason="Forming", last_transition_time="t0"
        ),
    )
    same = (conditions.Condition(type="Ready", status="False", reason="NodeNotReady"),)
    flipped = (conditions.Condition(type="Ready", status="True", reason="AllNodesReady"),)
    assert conditions.merged(old, same, at="t1")[0].last_transition_time == "t0"
    assert conditions.merged(old, flipped, at="t1")[0].last_transition_time == "t1"
    assert conditions.merged((), same, at="t1")[0].last_transition_time == "t1"


def test_transitions() -> None:
    def node(name: str, st: Readiness) -> ComputeDomainNode:
        return ComputeDomainNode(name=name, ip_address="1", clique_id=C1, index=0, status=st)

    why = {
        "a": verdict.Why(cause=verdict.Cause.LOST, text="the node is NotReady"),
        "b": verdict.Why(cause=verdict.Cause.LOST, text="its IMEX daemon pod is gone"),
    }
    old = ComputeDomainStatus(nodes=(node("a", R), node("b", R), node("c", R)))
    new = status.Derived(
        status=ComputeDomainStatus(nodes=(node("a", N), node("b", N), node("d", N))), why=why
    )
    changes = statuschange.transitions(old, new)
    assert [(t.node, t.kind, t.why) for t in changes] == [
        ("a", "not-ready", "the node is NotReady"),
        ("b", "not-ready", "its IMEX daemon pod is gone"),
        ("c", "left", ""),
        ("d", "joined", ""),
    ]
    # Back: only a member that had gone NotReady is announced as Ready again.
    lost = conditions.Condition(type="Ready", status="False", reason="NodeNotReady")
    forming = conditions.Condition(type="Ready", status="False", reason="Forming")
    back = status.Derived(status=ComputeDomainStatus(nodes=(node("a", R),)), why={})
    was_lost = ComputeDomainStatus(nodes=(node("a", N),), conditions=(lost,))
    was_forming = ComputeDomainStatus(nodes=(node("a", N),), conditions=(forming,))
    assert [(t.node, t.kind) for t in statuschange.transitions(was_lost, back)] == [("a", "ready")]
    assert statuschange.transitions(was_forming, back) == []


def test_daemon_pod_summary_from_a_pod() -> None:
    from lightkube.resources.core_v1 import Pod

    pod = Pod.from_dict(
        {
            "metadata": {
                "name": "d",
                "labels": {"resource.nvidia.com/computeDomain.cliqueID": ""},
                "annotations": {"compute-domains/imex-blocked": "held"},
            },
            "spec": {"nodeName": "n", "containers": [{"name": "c"}]},
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    assert status.DaemonPod.from_pod(pod) == status.DaemonPod(
        name="d", node_name="n", ip="10.0.0.1", ready=True, clique_id="", blocked="held"
    )


def test_warm_spares_are_members_that_count_toward_num_nodes() -> None:
    inputs: dict[str, Any] = {
        "cliques": [_clique(C1, ("a", "1", R), ("b", "2", R)), _clique(C2, ("s", "3", R))],
        "pods": [_pod("a", "1"), _pod("b", "2"), _pod("s", "3", clique=C2)],
        "node_ready": {"a": True, "b": True, "s": True},
        "workload": _held("a", "b"),  # s is a warm spare: a daemon, no workload
    }
    st = _derive(**inputs, num_nodes=3).status
    assert _summary(st) == {"a": (C1, 0, "Ready"), "b": (C1, 1, "Ready"), "s": (C2, 0, "Ready")}
    assert _ready_condition(st) == ("True", "AllNodesReady", "all 3 nodes Ready")
    # The same workload without the warm spare (NVIDIA's behaviour: daemons only where claims are).
    cold = _derive(
        **{**inputs, "cliques": inputs["cliques"][:1], "pods": inputs["pods"][:2]}, num_nodes=3
    ).status
    status_, reason, message = _ready_condition(cold)
    assert (status_, reason) == ("False", "Forming")
    assert message.startswith(
        "2 of 2 nodes Ready; 2 of 3 nodes (numNodes) listed: 2 hold a workload claim, 0 are warm"
    )
    assert "compute-domains/warm-nodes annotation selects (warm spares)" in message


def test_a_failed_warm_spare_drops_out_and_a_failed_workload_node_stays() -> None:
    inputs: dict[str, Any] = {
        "cliques": [_clique(C1, ("a", "1", R), ("s", "2", R)), _clique(C2, ("b", "3", R))],
        "pods": [_pod("a", "1"), _pod("s", "2"), _pod("b", "3", clique=C2)],
        "node_ready": {"a": True, "s": False, "b": True},
        "workload": _held("a", "b"),
    }
    st = _derive(**inputs).status
    assert _summary(st) == {"a": (C1, 0, "Ready"), "b": (C2, 0, "Ready")}  # s held nothing
    assert _ready_condition(st) == ("True", "AllNodesReady", "all 2 nodes Ready")
    gone = _derive(**{**inputs, "node_ready": {"a": True, "b": True}}).status  # s deleted
    assert _summary(gone) == _summary(st)
    # A node that holds a workload keeps today's rule: listed NotReady while its workload is there;
    # the other clique's entry is untouched.
    down = _derive(**{**inputs, "node_ready": {"a": False, "s": True, "b": True}}).status
    assert _summary(down) == {
        "a": (C1, 0, "NotReady"),
        "s": (C1, 1, "Ready"),
        "b": (C2, 0, "Ready"),
    }
    assert _ready_condition(down)[:2] == ("False", "NodeNotReady")


def test_extra_conditions_are_appended_after_ready() -> None:
    extra = conditions.Condition(type="WarmNodes", status="True", reason="AllSelectedWarm")
    st = _derive(cliques=[], pods=[], node_ready={}, extra=(extra,)).status
    assert [c.type for c in st.conditions] == ["Ready", "WarmNodes"]
