"""The failure timeline's marks: one per transition, none for the state before the run."""

from __future__ import annotations

from typing import Any, cast

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.bench import timeline


def _tl() -> timeline.Timeline:
    return timeline.Timeline(cast(AsyncClient, None), namespace="default", driver_ns="d", cd="cd")


def _node(ready: bool) -> Node:
    status = "True" if ready else "Unknown"
    return cast(
        Node,
        Node.from_dict(
            {
                "metadata": {"name": "n1"},
                "status": {"conditions": [{"type": "Ready", "status": status}]},
            }
        ),
    )


def _pod(node: str | None = None, ready: bool = False, **meta: Any) -> Pod:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if meta.get("deletionTimestamp"):
        conditions.append(
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        )
    return cast(
        Pod,
        Pod.from_dict(
            {
                "metadata": {"name": "p", **meta},
                "spec": {"nodeName": node, "containers": [{"name": "c"}]},
                "status": {"conditions": conditions},
            }
        ),
    )


def test_node_transitions_are_marked_once() -> None:
    tl = _tl()
    tl._baseline(tl._on_node, _node(True))
    tl._on_node(_node(True), False)
    tl._on_node(_node(False), False)
    tl._on_node(_node(False), False)
    tl._on_node(_node(True), False)
    assert [(m.what, m.name) for m in tl.marks] == [("node-not-ready", "n1"), ("node-ready", "n1")]


def test_a_pods_life_in_marks() -> None:
    tl = _tl()
    tl._on_pod(_pod(), False)
    tl._on_pod(_pod("n1"), False)
    tl._on_pod(_pod("n1", ready=True), False)
    tl._on_pod(_pod("n1", ready=True, deletionTimestamp="2026-12-01T00:00:00Z"), False)
    tl._on_pod(_pod("n1"), True)
    assert [(m.what, m.detail) for m in tl.marks] == [
        ("pod-created", ""),
        ("pod-bound", "n1"),
        ("pod-ready", "n1"),
        ("pod-deleting", "PreemptionByScheduler"),
        ("pod-gone", "n1"),
    ]
    assert tl.pods == {}


def test_entry_marks_only_for_status_or_index_changes() -> None:
    tl = _tl()

    class _Cd:
        class metadata:  # the shape of a lightkube object
            name = "cd"

        def __init__(self, nodes: list[dict[str, Any]]) -> None:
            self._nodes = nodes

        def to_dict(self) -> dict[str, Any]:
            return {"status": {"nodes": self._nodes}}

    tl._on_cd(_Cd([{"name": "n1", "status": "Ready", "index": 0}]), False)
    tl._on_cd(_Cd([{"name": "n1", "status": "Ready", "index": 0, "ipAddress": "x"}]), False)
    tl._on_cd(_Cd([{"name": "n1", "status": "NotReady", "index": 0}]), False)
    tl._on_cd(_Cd([]), False)
    assert [m.detail for m in tl.marks] == ["Ready index 0", "NotReady index 0", "removed"]
