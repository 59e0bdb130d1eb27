"""The agent's registry writes as patches without a resourceVersion (issue 28): our entry's
change guarded by tests of its node name and index at its position, a new claim appended, a
void claim removed and appended anew, and labels and annotations as a merge patch of the keys
that changed, never the shared ``lastIndices`` value."""

from __future__ import annotations

import dataclasses

import pytest

from compute_domains.agent import registry, registrypatch
from compute_domains.api import names, sharedimex
from compute_domains.api.clique import CliqueDaemon, ComputeDomainClique
from compute_domains.api.computedomain import Readiness

CLIQUE = "uuid.1"


def _plan(
    current: ComputeDomainClique | None, node: str, ip: str, **kw: object
) -> ComputeDomainClique:
    wanted = registry.plan(
        current,
        node=node,
        ip=ip,
        clique_id=CLIQUE,
        namespace="driver",
        max_nodes=18,
        status=kw.pop("status", Readiness.NOT_READY),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )
    assert wanted is not None
    return wanted


def _with(clique: ComputeDomainClique, node: str, ip: str, index: int) -> ComputeDomainClique:
    entry = CliqueDaemon(node_name=node, ip_address=ip, clique_id=CLIQUE, index=index)
    return dataclasses.replace(clique, daemons=(*clique.daemons, entry))


ONE = _plan(None, "n0", "10.0.0.1")


def test_a_new_claim_is_one_append_and_nothing_else() -> None:
    wanted = _plan(ONE, "n1", "10.0.0.2")
    ops = registrypatch.entry_ops(ONE, wanted, "n1")
    assert ops == [{"op": "add", "path": "/daemons/-", "value": wanted.daemons[-1].to_dict()}]
    assert registrypatch.meta_patch(ONE, wanted) == {}  # lastIndices: never rewritten


def test_our_status_and_ip_are_set_under_tests_of_our_entry_at_its_position() -> None:
    both = _with(ONE, "n1", "10.0.0.2", 5)
    wanted = _plan(both, "n1", "10.0.0.9", status=Readiness.READY)
    assert registrypatch.entry_ops(both, wanted, "n1") == [
        {"op": "test", "path": "/daemons/1/nodeName", "value": "n1"},
        {"op": "test", "path": "/daemons/1/index", "value": 5},
        {"op": "replace", "path": "/daemons/1/ipAddress", "value": "10.0.0.9"},
        {"op": "add", "path": "/daemons/1/status", "value": "Ready"},
    ]
    assert registrypatch.entry_ops(both, both, "n1") == []


def test_a_void_claim_is_removed_under_tests_and_appended_anew_in_one_patch() -> None:
    raced = _with(_with(ONE, "n1", "10.0.0.2", 5), "n2", "10.0.0.3", 5)
    wanted = _plan(raced, "n2", "10.0.0.3")
    ops = registrypatch.entry_ops(raced, wanted, "n2")
    assert ops[:4] == [
        {"op": "test", "path": "/daemons/2/nodeName", "value": "n2"},
        {"op": "test", "path": "/daemons/2/index", "value": 5},
        {"op": "test", "path": "/daemons/2/ipAddress", "value": "10.0.0.3"},
        {"op": "remove", "path": "/daemons/2"},
    ]
    assert ops[4]["path"] == "/daemons/-" and ops[4]["value"]["index"] not in (0, 5)


def test_a_plan_touching_another_entry_or_a_list_without_entries_is_refused() -> None:
    both = _with(ONE, "n1", "10.0.0.2", 5)
    with pytest.raises(ValueError, match="other nodes"):
        registrypatch.entry_ops(both, ONE.with_status("n0", Readiness.READY), "n1")
    empty = dataclasses.replace(ONE, daemons=())
    with pytest.raises(ValueError, match="no entries"):
        registrypatch.entry_ops(empty, ONE, "n0")


def test_labels_and_annotations_are_merged_by_key_and_removals_are_nulls() -> None:
    blocked = sharedimex.blocked_key(0)
    have = ONE.with_annotation(blocked, "old").with_annotation("other", "x")
    want = ONE.with_annotation("other", "x").with_annotation(names.LAST_INDICES_ANNOTATION, "{}")
    assert registrypatch.meta_patch(have, want) == {"metadata": {"annotations": {blocked: None}}}
