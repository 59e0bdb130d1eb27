"""Which pods wait on a node another CD holds, and whether they are re-placed, wait or are left."""

from __future__ import annotations

from typing import Any

import pytest

from compute_domains.api import conditions, names, sharedimex
from compute_domains.controller import claims, heldnodes, status

A, B = "uid-a", "uid-b"


def _claim(
    domain: str, *, node: str = "n1", pods: tuple[str, ...] = ("p",), owned: bool = True
) -> dict[str, Any]:
    params = {"kind": names.CHANNEL_CONFIG_KIND, "domainID": domain}
    meta: dict[str, Any] = {"name": f"{pods[0] if pods else 'x'}-cd", "namespace": "ns"}
    if owned and pods:
        meta["ownerReferences"] = [
            {"kind": "Pod", "name": pods[0], "uid": f"{pods[0]}-uid", "controller": True}
        ]
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {
        "metadata": meta,
        "spec": {
            "devices": {"config": [{"opaque": {"driver": names.DRIVER_NAME, "parameters": params}}]}
        },
        "status": {
            "allocation": {"nodeSelector": {"nodeSelectorTerms": [term]}},
            "reservedFor": [{"resource": "pods", "name": p, "uid": f"{p}-uid"} for p in pods],
        },
    }


def _pod(
    *,
    uid: str = "p-uid",
    node: str | None = "n1",
    phase: str = "Pending",
    owner: str | None = "ReplicaSet",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": uid}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner, "name": "job-1", "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("labels", "want"),
    [
        ({}, ""),
        ({names.COMPUTE_DOMAIN_LABEL: A}, A),
        ({names.WARM_FOR_LABEL: B}, B),
        ({names.COMPUTE_DOMAIN_LABEL: A, names.WARM_FOR_LABEL: B}, A),
    ],
)
def test_holder_is_the_cd_label_else_the_warm_label(labels: dict[str, str], want: str) -> None:
    assert heldnodes.holder({"metadata": {"labels": labels}}) == want
    assert heldnodes.holder(None) == ""


def test_conflicts_are_the_other_cds_pods_on_a_held_node() -> None:
    claims = [_claim(A, pods=("a",)), _claim(B, pods=("b",)), _claim(B, node="n2", pods=("c",))]
    (found,) = heldnodes.conflicts("n1", A, claims)
    assert (found.loser, found.holder, found.pod, found.pod_uid) == (B, A, "b", "b-uid")
    assert found.claim_owned and found.claim == "b-cd" and found.namespace == "ns"
    assert heldnodes.conflicts("n1", "", claims) == [], "a free node has no conflicts"


def test_a_shared_or_hand_made_claim_is_not_the_pods_own() -> None:
    shared = heldnodes.conflicts("n1", A, [_claim(B, pods=("b", "c"))])
    assert [(c.pod, c.claim_owned) for c in shared] == [("b", False), ("c", False)]
    (hand,) = heldnodes.conflicts("n1", A, [_claim(B, owned=False)])
    assert not hand.claim_owned


CONFLICT = heldnodes.Conflict(
    node="n1", holder=A, loser=B, namespace="ns", claim="p-cd", claim_owned=True, pod="p",
    pod_uid="p-uid",
)  # fmt: skip


@pytest.mark.parametrize(
    ("pod", "owned", "action", "why"),
    [
        (_pod(), True, heldnodes.Action.REPLACE, ""),
        (_pod(owner="StatefulSet"), True, heldnodes.Action.REPLACE, ""),
        (_pod(owner="Job"), True, heldnodes.Action.REPLACE, ""),
        (_pod(owner=None), True, heldnodes.Action.WAIT, "no controller"),
        (_pod(owner="DaemonSet"), True, heldnodes.Action.WAIT, "same node"),
        (_pod(), False, heldnodes.Action.WAIT, "not its own"),
        (None, True, heldnodes.Action.SKIP, "gone"),
        (_pod(uid="other"), True, heldnodes.Action.SKIP, "replaced"),
        (_pod(deleting=True), True, heldnodes.Action.SKIP, "terminating"),
        (_pod(node=None), True, heldnodes.Action.SKIP, "no node yet"),
        (_pod(node="n2"), True, heldnodes.Action.SKIP, "bound to n2"),
        (_pod(phase="Running"), True, heldnodes.Action.SKIP, "prepared"),
    ],
)
def test_decide(pod: Any, owned: bool, action: heldnodes.Action, why: str) -> None:
    conflict = heldnodes.Conflict(**{**_fields(CONFLICT), "claim_owned": owned})
    decision = heldnodes.decide(conflict, pod)
    assert decision.action is action
    assert why in decision.why


def _fields(c: heldnodes.Conflict) -> dict[str, Any]:
    return {f: getattr(c, f) for f in c.__dataclass_fields__}


def test_advertises_only_the_holders_uid_on_a_channel() -> None:
    def slice_(holder: str | None) -> dict[str, Any]:
        attrs: dict[str, Any] = {"type": {"string": "channel"}}
        if holder is not None:
            attrs[names.CHANNEL_HOLDER_ATTRIBUTE] = {"string": holder}
        return {"spec": {"devices": [{"name": "channel-0", "attributes": attrs}]}}

    assert heldnodes.advertises(slice_(A), A)
    assert not heldnodes.advertises(slice_(None), A)
    assert not heldnodes.advertises(slice_(B), A)
    assert not heldnodes.advertises(None, A)


def test_the_status_names_the_holder_and_the_waiting_pod() -> None:
    """``status.derive``'s hook: a workload node held by another CD says so, not "waiting for
    its IMEX daemon pod" (issue 29)."""
    waiting = claims.WorkloadClaim(namespace="ns", name="p-cd", node="n1", pods=("p",))
    text = heldnodes.held_text("ns/cd-a (uid-a)", [waiting])
    derived = status.derive(
        num_nodes=0,
        cliques=[],
        pods=[],
        node_ready={"n1": True},
        workload=[waiting],
        held_by={"n1": text},
    )
    assert derived.why["n1"].text == text
    assert "held by ComputeDomain ns/cd-a (uid-a); ns/p waiting there" in text
    ready = derived.status.condition(conditions.READY)
    assert ready is not None and text in ready.message, ready
    plain = status.derive(
        num_nodes=0, cliques=[], pods=[], node_ready={"n1": True}, workload=[waiting]
    )
    assert "held by" not in plain.why["n1"].text


SHARED_NODE = {"metadata": {"labels": {sharedimex.SHARED_IMEX_LABEL: sharedimex.SHARED_IMEX_ON}}}


def test_a_node_in_the_per_clique_scope_is_held_by_the_shared_imex() -> None:
    assert heldnodes.holder(SHARED_NODE) == sharedimex.SHARED_HOLDER
    both = {**SHARED_NODE["metadata"]["labels"], names.COMPUTE_DOMAIN_LABEL: A}
    assert heldnodes.holder({"metadata": {"labels": both}}) == A  # a CD's label comes first
    off = {"metadata": {"labels": {sharedimex.SHARED_IMEX_LABEL: "off"}}}
    assert heldnodes.holder(off) == ""


def test_a_shared_node_keeps_per_domain_cds_off_and_takes_every_per_clique_one() -> None:
    """A plugin refusal of either scope is one NodeHeldError; the replacer acts on the node's
    holder and each claim's CD scope, never on the plugin's message."""
    held = [_claim(A, pods=("a",)), _claim(B, pods=("b",))]
    (found,) = heldnodes.conflicts("n1", sharedimex.SHARED_HOLDER, held, lambda uid: uid == A)
    assert (found.loser, found.holder, found.pod) == (B, sharedimex.SHARED_HOLDER, "b")
    # A per-clique CD's pod on a node a per-domain CD holds is re-placed like any other.
    (other,) = heldnodes.conflicts("n1", B, held, lambda uid: uid == A)
    assert (other.loser, other.pod) == (A, "a")
    assert not heldnodes.keeps_off(sharedimex.SHARED_HOLDER, A, shared=True)
    assert heldnodes.keeps_off(sharedimex.SHARED_HOLDER, B, shared=False)
    assert heldnodes.holder_words(sharedimex.SHARED_HOLDER, str).startswith("the per-clique scope")
    assert heldnodes.holder_words(A, lambda u: f"ns/a ({u})") == f"ComputeDomain ns/a ({A})"
    waiting = claims.WorkloadClaim(namespace="ns", name="p-cd", node="n1", pods=("p",))
    text = heldnodes.held_text(sharedimex.SHARED_HOLDER, [waiting], shared=True)
    assert text.startswith("in the per-clique scope") and "ns/p waiting there" in text
