"""Which ranks are lost (and why), from the job's pods and the nodes' readiness."""

from __future__ import annotations

from typing import Any, cast

import pytest
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.jobs import plan, ranks

A, B = "uuid-a", "uuid-b"


def _node(name: str, ready: str = "True") -> Node:
    return cast(
        Node,
        Node.from_dict(
            {
                "metadata": {"name": name},
                "status": {"conditions": [{"type": "Ready", "status": ready}]},
            }
        ),
    )


def _pod(
    rank: int | str,
    generation: int = 0,
    *,
    node: str | None = "n1",
    phase: str = "Running",
    deleting: bool = False,
) -> Pod:
    meta: dict[str, Any] = {
        "name": f"j-{rank}-r{generation}",
        "labels": {plan.RANK_LABEL: str(rank), plan.GENERATION_LABEL: str(generation)},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    return cast(Pod, Pod.from_dict({"metadata": meta, "spec": spec, "status": {"phase": phase}}))


NODES = [_node("n1"), _node("n2", "False"), _node("n3", "Unknown")]


@pytest.mark.parametrize(
    ("pod", "reason"),
    [
        pytest.param(_pod(0), "", id="running-on-ready-node"),
        pytest.param(_pod(0, node=None, phase="Pending"), "", id="pending-unscheduled"),
        pytest.param(_pod(0, phase="Failed"), "pod Failed", id="failed"),
        pytest.param(_pod(0, phase="Succeeded"), "pod Succeeded", id="succeeded"),
        pytest.param(_pod(0, deleting=True), "pod being deleted", id="evicted"),
        pytest.param(_pod(0, node="n2"), "node n2 not Ready", id="node-not-ready"),
        pytest.param(_pod(0, node="n3"), "node n3 not Ready", id="node-unknown"),
        pytest.param(_pod(0, node="gone"), "node gone not Ready", id="node-deleted"),
    ],
)
def test_a_pod_is_lost_when_it_ended_is_deleted_or_its_node_is_not_ready(
    pod: Pod, reason: str
) -> None:
    (state,) = ranks.rank_states([A], [pod], NODES)
    assert ranks.lost_reason(pod, {"n1": True, "n2": False, "n3": False}).startswith(reason)
    assert state.is_lost == bool(reason)
    assert [r for _, r in state.lost] == ([ranks.lost_reason(pod, {"n1": True})] if reason else [])


def test_a_rank_without_any_pod_is_lost_and_its_replacement_is_generation_1() -> None:
    states = ranks.rank_states([A, A, B], [_pod(0), _pod(2)], NODES)
    assert [s.is_lost for s in states] == [False, True, False]
    assert states[1].next_generation == 1
    assert [s.cluster_uuid for s in states] == [A, A, B]


def test_the_next_generation_follows_the_highest_listed() -> None:
    pods = [_pod(1, 0, phase="Failed"), _pod(1, 3, node="n2"), _pod(1, 1, deleting=True)]
    (_, state) = ranks.rank_states([A, B], pods, NODES)
    assert state.is_lost
    assert state.next_generation == 4
    assert [p.metadata.name for p, _ in state.lost] == ["j-1-r0", "j-1-r1", "j-1-r3"]  # type: ignore[union-attr]


def test_a_live_replacement_serves_its_rank_beside_its_lost_predecessor() -> None:
    (state,) = ranks.rank_states([A], [_pod(0, 0, node="n2"), _pod(0, 1)], NODES)
    assert not state.is_lost
    assert state.live is not None and state.live.metadata.name == "j-0-r1"  # type: ignore[union-attr]
    assert len(state.lost) == 1


def test_pods_without_a_rank_label_are_not_the_jobs() -> None:
    (state,) = ranks.rank_states([A], [_pod("x")], NODES)
    assert state.is_lost and state.pods == ()
