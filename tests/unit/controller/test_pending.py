"""Pods of the job that wait for the scheduler keep the CD NotReady (issue 29, point 2)."""

from __future__ import annotations

import json
from typing import Any

from compute_domains.api import conditions
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import ComputeDomainStatus, Readiness
from compute_domains.controller import claims, pending, status

UID = "cd-uid"
C1 = "cluster.1"
SCHEDULER = "0/4 nodes are available: 4 cannot allocate all claims. preemption: not helpful."


def _ready_abc() -> dict[str, Any]:
    clique = ComputeDomainClique.new(domain_uid=UID, clique_id=C1, namespace="ns")
    for node, ip in (("a", "1"), ("b", "2"), ("c", "3")):
        clique = clique.with_registered(node, ip).with_status(node, Readiness.READY)
    pods = [
        status.DaemonPod(name=f"p-{n}", node_name=n, ip=ip, ready=True, clique_id=C1)
        for n, ip in (("a", "1"), ("b", "2"), ("c", "3"))
    ]
    held = [claims.WorkloadClaim(namespace="ns", name=f"c-{n}", node=n) for n in "abc"]
    return {
        "num_nodes": 0,
        "cliques": [clique],
        "pods": pods,
        "node_ready": {"a": True, "b": True, "c": True},
        "workload": [*held, claims.WorkloadClaim(namespace="ns", name="c-d", node="", owner="w-3")],
    }


def _ready(st: ComputeDomainStatus) -> tuple[str, str, str]:
    cond = st.condition(conditions.READY)
    assert cond is not None
    return cond.status, cond.reason, cond.message


def test_three_of_four_replicas_placed_is_not_ready_and_names_the_pending_pod() -> None:
    waiting = [pending.PendingPod(namespace="ns", name="w-3", claim="c-d", message=SCHEDULER)]
    st = status.derive(**_ready_abc(), waiting=waiting).status
    assert st.status is Readiness.NOT_READY
    state, reason, message = _ready(st)
    assert (state, reason) == ("False", "PodsPending")
    assert "3 of 3 nodes Ready" in message
    assert "pod ns/w-3 (claim c-d): " + SCHEDULER in message
    # Control: without the pending pod the same facts are Ready.
    assert _ready(status.derive(**_ready_abc()).status)[1] == "AllNodesReady"


def test_a_pod_the_scheduler_has_not_tried_yet_still_keeps_it_not_ready() -> None:
    waiting = [pending.PendingPod(namespace="ns", name="w-3", claim="c-d")]
    st = status.derive(**_ready_abc(), waiting=waiting).status
    state, reason, message = _ready(st)
    assert (state, reason) == ("False", "Forming")
    assert "pod ns/w-3 (claim c-d): not tried by the scheduler yet" in message


def test_no_workload_because_another_cd_holds_the_nodes_names_the_holder() -> None:
    waiting = [pending.PendingPod(namespace="ns", name="w-0", claim="c-0", message=SCHEDULER)]
    held = {"other-uid": ["n1", "n0"], UID: ["n9"]}
    holders = pending.holders(held, UID, lambda uid: "team/big-job" if uid == "other-uid" else None)
    assert holders == ["ComputeDomain team/big-job holds n0, n1"]
    st = status.derive(
        num_nodes=0, cliques=[], pods=[], node_ready={}, waiting=waiting, holders=holders
    ).status
    state, reason, message = _ready(st)
    assert (state, reason) == ("False", "PodsPending")
    assert SCHEDULER in message and "ComputeDomain team/big-job holds n0, n1" in message


def test_a_status_without_workload_never_says_nodes() -> None:
    """NVIDIA's ``daemon shutdown: confirm CD status cleanup`` greps the CD status after the
    workload is gone with ``refute_output --partial 'nodes'``."""
    for num_nodes in (0, 1, 4):
        st = status.derive(num_nodes=num_nodes, cliques=[], pods=[], node_ready={}).status
        assert _ready(st)[1] == "NoWorkload"
        text = json.dumps(st.to_dict())
        assert "nodes" not in text, text
    # Nor while a pod waits that the scheduler has not tried yet.
    waiting = [pending.PendingPod(namespace="ns", name="w-0", claim="c-0")]
    st = status.derive(num_nodes=1, cliques=[], pods=[], node_ready={}, waiting=waiting).status
    assert "nodes" not in json.dumps(st.to_dict())


def test_claim_keys_and_waiting_read_a_pod() -> None:
    pod = {
        "metadata": {"namespace": "ns", "name": "w-3"},
        "spec": {"resourceClaims": [{"name": "x", "resourceClaimName": "shared"}]},
        "status": {
            "resourceClaimStatuses": [{"name": "ch", "resourceClaimName": "w-3-ch-abcde"}],
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": SCHEDULER,
                }
            ],
        },
    }
    assert list(pending.claim_keys(pod)) == ["ns/shared", "ns/w-3-ch-abcde"]
    found = pending.waiting(pod, "w-3-ch-abcde")
    assert found == pending.PendingPod(
        namespace="ns", name="w-3", claim="w-3-ch-abcde", message=SCHEDULER
    )
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert pending.waiting(deleting, "x") is None
    placed = {**pod, "spec": {"nodeName": "n0"}}
    assert pending.waiting(placed, "x") is None


def test_a_template_claim_names_its_owner_pod() -> None:
    claim = {
        "metadata": {
            "namespace": "ns",
            "name": "w-3-ch-abcde",
            "ownerReferences": [{"kind": "Pod", "name": "w-3", "controller": True, "uid": "u"}],
        },
        "spec": {},
    }
    assert claims.WorkloadClaim.from_claim(claim).owner == "w-3"
