"""Pure status derivation: entries from cliques and pods, readiness gating, pruning, events."""

from __future__ import annotations

from typing import Any

import pytest

from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import ComputeDomainNode, ComputeDomainStatus, Readiness
from compute_domains.controller import status

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


CASES: list[tuple[str, dict[str, Any], str, dict[str, tuple[str, int, str]]]] = [
    ("empty", {"cliques": [], "pods": [], "ready": {}}, "Ready", {}),
    (
        "all-ready",
        {
            "cliques": [_clique(C1, ("a", "1", R), ("b", "2", R))],
            "pods": [_pod("a", "1"), _pod("b", "2")],
            "ready": {"a": True, "b": True},
        },
        "Ready",
        {"a": (C1, 0, "Ready"), "b": (C1, 1, "Ready")},
    ),
    (
        "clique-not-ready",
        {"cliques": [_clique(C1, ("a", "1", N))], "pods": [_pod("a", "1")], "ready": {"a": True}},
        "NotReady",
        {"a": (C1, 0, "NotReady")},
    ),
    (
        "pod-not-ready",
        {
            "cliques": [_clique(C1, ("a", "1", R))],
            "pods": [_pod("a", "1", ready=False)],
            "ready": {"a": True},
        },
        "NotReady",
        {"a": (C1, 0, "NotReady")},
    ),
    (
        "node-not-ready",
        {"cliques": [_clique(C1, ("a", "1", R))], "pods": [_pod("a", "1")], "ready": {"a": False}},
        "NotReady",
        {"a": (C1, 0, "NotReady")},
    ),
    (
        "node-deleted",
        {"cliques": [_clique(C1, ("a", "1", R))], "pods": [_pod("a", "1")], "ready": {}},
        "NotReady",
        {"a": (C1, 0, "NotReady")},
    ),
    (
        "pod-gone",
        {
            "cliques": [_clique(C1, ("a", "1", R), ("b", "2", R))],
            "pods": [_pod("b", "2")],
            "ready": {"a": True, "b": True},
        },
        "Ready",
        {"b": (C1, 1, "Ready")},
    ),
    (
        "two-cliques-and-non-fabric",
        {
            "cliques": [_clique(C2, ("c", "3", R)), _clique(C1, ("a", "1", R))],
            "pods": [_pod("a", "1"), _pod("c", "3", clique=C2), _pod("p", "9", clique="")],
            "ready": {"a": True, "c": True, "p": True},
        },
        "Ready",
        {"a": (C1, 0, "Ready"), "c": (C2, 0, "Ready"), "p": ("", -1, "Ready")},
    ),
    (
        "non-fabric-pod-not-ready",
        {"cliques": [], "pods": [_pod("p", "9", ready=False, clique="")], "ready": {"p": True}},
        "NotReady",
        {"p": ("", -1, "NotReady")},
    ),
    (
        "unlabelled-pod-is-not-an-entry",
        {"cliques": [], "pods": [_pod("x", "9", clique=None)], "ready": {"x": True}},
        "Ready",
        {},
    ),
    (
        "node-listed-twice-keeps-first",
        {
            "cliques": [_clique(C1, ("a", "1", R)), _clique(C2, ("a", "1", N))],
            "pods": [_pod("a", "1")],
            "ready": {"a": True},
        },
        "Ready",
        {"a": (C1, 0, "Ready")},
    ),
]


@pytest.mark.parametrize(("case", "inputs", "overall", "entries"), CASES, ids=[c[0] for c in CASES])
def test_derive(
    case: str, inputs: dict[str, Any], overall: str, entries: dict[str, tuple[str, int, str]]
) -> None:
    st = status.derive(
        num_nodes=0, cliques=inputs["cliques"], pods=inputs["pods"], node_ready=inputs["ready"]
    )
    assert st.status.value == overall
    assert _summary(st) == entries


def test_num_nodes_holds_status_until_enough_entries() -> None:
    inputs: dict[str, Any] = {
        "cliques": [_clique(C1, ("a", "1", R))],
        "pods": [_pod("a", "1")],
        "node_ready": {"a": True},
    }
    assert status.derive(num_nodes=2, **inputs).status is Readiness.NOT_READY
    assert status.derive(num_nodes=1, **inputs).status is Readiness.READY


def test_indices_are_copied_never_reassigned() -> None:
    clique = _clique(C1, ("a", "1", R), ("b", "2", R), ("c", "3", R)).retaining_nodes(["a", "c"])
    st = status.derive(
        num_nodes=0,
        cliques=[clique],
        pods=[_pod("a", "1"), _pod("c", "3")],
        node_ready={"a": True, "c": True},
    )
    assert [(n.name, n.index) for n in st.nodes] == [("a", 0), ("c", 2)]


def test_stale_and_full_cliques() -> None:
    clique = _clique(C1, ("a", "1", R), ("b", "2", R))
    assert status.stale_clique_nodes(clique, {"b"}) == ["a"]
    pods = [_pod("a", "1"), _pod("b", "2"), _pod("z", "26"), _pod("y", "25", clique=C2)]
    assert status.full_clique_nodes([clique], pods, max_nodes=2) == [("z", C1)]
    assert status.full_clique_nodes([clique], pods, max_nodes=3) == []


def test_differs_ignores_node_order_but_not_content() -> None:
    a = ComputeDomainNode(name="a", ip_address="1", clique_id=C1, index=0, status=R)
    b = ComputeDomainNode(name="b", ip_address="2", clique_id=C1, index=1, status=R)
    desired = ComputeDomainStatus.computed([a, b], num_nodes=0)
    stored = desired.to_dict()
    stored["nodes"] = list(reversed(stored["nodes"]))
    assert not status.differs(stored, desired)
    assert status.differs(None, desired)
    assert status.differs({"status": "Ready", "nodes": stored["nodes"]}, desired)  # no counters
    stored["nodes"][0]["status"] = "NotReady"
    assert status.differs(stored, desired)


def test_transitions() -> None:
    def node(name: str, st: Readiness) -> ComputeDomainNode:
        return ComputeDomainNode(name=name, ip_address="1", clique_id=C1, index=0, status=st)

    old = [node("a", R), node("b", R), node("c", R)]
    new = [node("a", N), node("b", N), node("d", N)]
    changes = status.transitions(old, new, {"a": False, "b": True})
    assert [(t.node, t.kind) for t in changes] == [("a", "lost"), ("c", "left"), ("d", "joined")]


def test_daemon_pod_summary_from_a_pod() -> None:
    from lightkube.resources.core_v1 import Pod

    pod = Pod.from_dict(
        {
            "metadata": {"name": "d", "labels": {"resource.nvidia.com/computeDomain.cliqueID": ""}},
            "spec": {"nodeName": "n", "containers": [{"name": "c"}]},
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    assert status.DaemonPod.from_pod(pod) == status.DaemonPod(
        name="d", node_name="n", ip="10.0.0.1", ready=True, clique_id=""
    )
