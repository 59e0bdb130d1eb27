"""The shared registry as an agent plans it: self-registration, stable indices, truthful
status, NotReady (never removed) at the end, and nothing it did not plan dropped."""

from __future__ import annotations

import dataclasses
import json

import pytest

from compute_domains.agent import registry
from compute_domains.api import names, sharedimex
from compute_domains.api.clique import CliqueDaemon, CliqueFullError, ComputeDomainClique
from compute_domains.api.computedomain import Readiness

CLIQUE = "uuid.1"
NS = "driver"
READY, NOT_READY = Readiness.READY, Readiness.NOT_READY


def _plan(
    current: ComputeDomainClique | None,
    node: str,
    ip: str,
    status: Readiness = NOT_READY,
    max_nodes: int = 18,
) -> ComputeDomainClique | None:
    return registry.plan(
        current,
        node=node,
        ip=ip,
        clique_id=CLIQUE,
        namespace=NS,
        max_nodes=max_nodes,
        status=status,
    )


def _stored(clique: ComputeDomainClique | None, version: str = "7") -> ComputeDomainClique:
    """``clique`` as the API server would return it (a resourceVersion)."""
    assert clique is not None
    body = clique.to_dict()
    body["metadata"] = {**body["metadata"], "resourceVersion": version}
    return ComputeDomainClique.from_dict(body)


def test_a_missing_registry_is_made_with_our_entry_and_no_cd_label_or_owner() -> None:
    made = _plan(None, "n0", "10.0.0.1")
    assert made is not None
    assert made.name == sharedimex.registry_name(CLIQUE) and made.namespace == NS
    assert made.metadata.labels == {
        sharedimex.SCOPE_LABEL: "perClique",
        names.CLIQUE_ID_LABEL: CLIQUE,
    }
    assert not made.metadata.ownerReferences
    (entry,) = made.daemons
    assert (entry.node_name, entry.ip_address, entry.index, entry.status) == (
        "n0",
        "10.0.0.1",
        0,
        NOT_READY,
    )
    assert entry.clique_id == CLIQUE
    assert made.remembered_indices() == {"n0": 0}


def test_nodes_get_distinct_indices_and_nothing_is_written_twice() -> None:
    one = _stored(_plan(None, "n0", "10.0.0.1"))
    two = _stored(_plan(one, "n1", "10.0.0.2"))
    assert {d.node_name: d.index for d in two.daemons} == {"n0": 0, "n1": 1}
    assert _plan(two, "n0", "10.0.0.1") is None
    assert _plan(two, "n1", "10.0.0.2") is None


def test_status_follows_our_check_and_only_ours() -> None:
    both = _stored(_plan(_stored(_plan(None, "n0", "10.0.0.1")), "n1", "10.0.0.2"))
    ready = _plan(both, "n1", "10.0.0.2", READY)
    assert ready is not None
    assert {d.node_name: d.status for d in ready.daemons} == {"n0": NOT_READY, "n1": READY}
    assert _plan(_stored(ready), "n1", "10.0.0.2", READY) is None


def test_a_new_pod_on_our_node_keeps_the_index_and_reports_its_own_status() -> None:
    old = _stored(_plan(_stored(_plan(None, "n0", "10.0.0.1")), "n1", "10.0.0.2", READY))
    new = _plan(old, "n1", "10.0.0.9", NOT_READY)
    assert new is not None
    entry = new.daemon("n1")
    assert entry is not None
    assert (entry.index, entry.ip_address, entry.status) == (1, "10.0.0.9", NOT_READY)


def test_other_writers_annotations_and_labels_are_kept_and_missing_labels_added() -> None:
    channel = sharedimex.channel_key("cd-a")
    plugin_made = ComputeDomainClique.from_dict(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.CLIQUE_KIND,
            "metadata": {
                "name": sharedimex.registry_name(CLIQUE),
                "namespace": NS,
                "resourceVersion": "3",
                "labels": {"x": "y"},
                "annotations": {channel: "1"},
            },
        }
    )
    wanted = _plan(plugin_made, "n0", "10.0.0.1")
    assert wanted is not None
    annotations = wanted.metadata.annotations or {}
    assert annotations[channel] == "1"
    assert json.loads(annotations[names.LAST_INDICES_ANNOTATION]) == {"n0": 0}
    assert wanted.metadata.labels == {
        "x": "y",
        sharedimex.SCOPE_LABEL: "perClique",
        names.CLIQUE_ID_LABEL: CLIQUE,
    }
    # The replace carries the version read: a concurrent write makes it conflict.
    assert wanted.metadata.resourceVersion == "3"


def test_a_node_that_left_and_returns_gets_its_remembered_index() -> None:
    both = _stored(_plan(_stored(_plan(None, "n0", "10.0.0.1")), "n1", "10.0.0.2"))
    # Entries are never removed by agents; were one pruned, lastIndices brings it back.
    pruned = _stored(both.retaining_nodes({"n1"}))
    back = _plan(pruned, "n0", "10.0.0.1")
    assert back is not None and back.daemon("n0") is not None
    assert back.daemon("n0").index == 0  # type: ignore[union-attr]


def test_a_full_registry_refuses_a_new_node() -> None:
    one = _stored(_plan(None, "n0", "10.0.0.1", max_nodes=1))
    with pytest.raises(CliqueFullError):
        _plan(one, "n1", "10.0.0.2", max_nodes=1)


def test_stopping_marks_our_entry_not_ready_and_keeps_it() -> None:
    ready = _stored(_plan(_stored(_plan(None, "n0", "10.0.0.1")), "n1", "10.0.0.2", READY))
    stopped = registry.plan_stopped(ready, node="n1", ip="10.0.0.2")
    assert stopped is not None
    entry = stopped.daemon("n1")
    assert entry is not None and (entry.index, entry.status) == (1, NOT_READY)
    assert len(stopped.daemons) == 2
    assert registry.plan_stopped(_stored(stopped), node="n1", ip="10.0.0.2") is None


@pytest.mark.parametrize(
    ("node", "ip"), [("n1", "10.0.0.9"), ("n7", "10.0.0.2")], ids=["taken-over", "not-listed"]
)
def test_stopping_leaves_an_entry_that_is_not_ours_alone(node: str, ip: str) -> None:
    ready = _stored(_plan(None, "n1", "10.0.0.2", READY))
    assert registry.plan_stopped(ready, node=node, ip=ip) is None
    assert registry.plan_stopped(None, node=node, ip=ip) is None


def test_a_registry_made_anew_gives_our_running_imex_its_index_back() -> None:
    both = _stored(_plan(_stored(_plan(None, "n0", "10.0.0.1")), "n1", "10.0.0.2"))
    assert both.daemon("n1") is not None
    # Deleted (its memory with it) while n1's IMEX runs as index 1: n1 asks for 1 again.
    again = registry.plan(
        None,
        node="n1",
        ip="10.0.0.2",
        clique_id=CLIQUE,
        namespace=NS,
        max_nodes=18,
        status=READY,
        index=1,
    )
    assert again is not None and again.daemon("n1") is not None
    assert again.daemon("n1").index == 1  # type: ignore[union-attr]


def _reporting(
    current: ComputeDomainClique | None,
    node: str,
    ip: str,
    *,
    lost: dict[int, str] | None = None,
    blocked: sharedimex.Blocked | None = None,
) -> ComputeDomainClique | None:
    return registry.plan(
        current,
        node=node,
        ip=ip,
        clique_id=CLIQUE,
        namespace=NS,
        max_nodes=18,
        status=NOT_READY,
        lost=lost,
        blocked=blocked,
    )


IN_USE = sharedimex.Blocked(reason="ImexSessionInUse", message="nvidia-imex cannot start: held")


def test_the_peers_our_imex_lost_are_our_lost_peers_note_by_node_name() -> None:
    """The per-domain daemon's note, on the registry under our index: the controller judges it
    for every CD our node serves; written once, removed when no peer is lost."""
    both = _stored(_plan(_stored(_plan(None, "n0", "10.0.0.1")), "n1", "10.0.0.2"))
    since = "2026-12-02T05:00:03Z"
    wanted = _reporting(both, "n1", "10.0.0.2", lost={0: since, 9: since})
    assert wanted is not None
    key = f"{names.LOST_PEERS_ANNOTATION_PREFIX}1"
    note = json.loads((wanted.metadata.annotations or {})[key])
    assert note == {"node": "n1", "ip": "10.0.0.2", "lost": {"n0": since}}  # index 9: no entry
    assert wanted.daemons == both.daemons  # nothing else changes
    assert _reporting(_stored(wanted), "n1", "10.0.0.2", lost={0: since}) is None
    healed = _reporting(_stored(wanted), "n1", "10.0.0.2", lost={})
    assert healed is not None and key not in (healed.metadata.annotations or {})


def test_why_our_imex_cannot_start_is_our_blocked_note_until_it_can() -> None:
    both = _stored(_plan(_stored(_plan(None, "n0", "10.0.0.1")), "n1", "10.0.0.2"))
    wanted = _reporting(both, "n1", "10.0.0.2", blocked=IN_USE)
    assert wanted is not None
    annotations = wanted.metadata.annotations or {}
    assert json.loads(annotations[sharedimex.blocked_key(1)]) == {
        "node": "n1",
        "ip": "10.0.0.2",
        "reason": "ImexSessionInUse",
        "message": "nvidia-imex cannot start: held",
    }
    assert sharedimex.blocked_of(annotations, index=1, node="n1", ip="10.0.0.2") == IN_USE
    assert _reporting(_stored(wanted), "n1", "10.0.0.2", blocked=IN_USE) is None
    # Stopping keeps the note (it is still true); IMEX passing its check removes it.
    assert registry.plan_stopped(_stored(wanted), node="n1", ip="10.0.0.2") is None
    cleared = _reporting(_stored(wanted), "n1", "10.0.0.2")
    assert cleared is not None
    assert sharedimex.blocked_key(1) not in (cleared.metadata.annotations or {})


def test_a_new_agent_pod_drops_its_predecessors_notes_and_writes_its_own() -> None:
    both = _stored(_plan(_stored(_plan(None, "n0", "10.0.0.1")), "n1", "10.0.0.2"))
    old = _stored(_reporting(both, "n1", "10.0.0.2", blocked=IN_USE, lost={0: "t"}))
    # Read by the controller with the entry's new IP, the old pod's notes count for nothing.
    assert (
        sharedimex.blocked_of(old.metadata.annotations, index=1, node="n1", ip="10.0.0.9") is None
    )
    new = _reporting(old, "n1", "10.0.0.9")
    assert new is not None
    annotations = new.metadata.annotations or {}
    assert sharedimex.blocked_key(1) not in annotations
    assert f"{names.LOST_PEERS_ANNOTATION_PREFIX}1" not in annotations


def _appended(clique: ComputeDomainClique, node: str, ip: str, index: int) -> ComputeDomainClique:
    """``clique`` with an entry appended as another agent's JSON patch lands, unchecked."""
    entry = CliqueDaemon(node_name=node, ip_address=ip, clique_id=CLIQUE, index=index)
    return _stored(dataclasses.replace(clique, daemons=(*clique.daemons, entry)))


def test_two_claims_of_one_index_the_earlier_wins_and_the_later_is_planned_anew() -> None:
    one = _stored(_plan(None, "n0", "10.0.0.1"))
    # n1 and n2 claimed the same index at once; the server appended n1's first.
    raced = _appended(_appended(one, "n1", "10.0.0.2", 1), "n2", "10.0.0.3", 1)
    assert registry.is_registered(raced, "n1", "10.0.0.2")
    assert not registry.is_registered(raced, "n2", "10.0.0.3")  # void: no IMEX on it
    assert [d.node_name for d in registry.without_void(raced, 18).daemons] == ["n0", "n1"]
    assert _plan(raced, "n1", "10.0.0.2") is None  # the winner has nothing to write
    again = _stored(_plan(raced, "n2", "10.0.0.3"))
    assert [d.node_name for d in again.daemons] == ["n0", "n1", "n2"]  # moved to the end
    assert registry.is_registered(again, "n2", "10.0.0.3")
    assert {d.node_name: d.index for d in again.daemons} == {"n0": 0, "n1": 1, "n2": 2}


def test_the_losers_of_one_race_claim_distinct_indices_lowest_first() -> None:
    one = _stored(_plan(None, "n0", "10.0.0.1"))
    raced = one
    for k in (1, 2, 3):  # three more agents claimed index 1 at once; n1's landed first
        raced = _appended(raced, f"n{k}", f"10.0.0.{k + 1}", 1)
    # n2 and n3 plan from the same list: the free indices 2, 3 go to the void entries in order.
    picks = {}
    for node in ("n2", "n3"):
        wanted = _plan(raced, node, f"10.0.0.{int(node[1]) + 1}")
        assert wanted is not None
        picks[node] = wanted.daemon(node).index  # type: ignore[union-attr]
    assert picks == {"n2": 2, "n3": 3}


def test_a_void_claim_in_a_full_clique_is_refused_with_the_reason() -> None:
    one = _stored(_plan(None, "n0", "10.0.0.1", max_nodes=2))
    raced = _appended(_appended(one, "n1", "10.0.0.2", 1), "n2", "10.0.0.3", 1)
    with pytest.raises(CliqueFullError, match="no available indices"):
        _plan(raced, "n2", "10.0.0.3", max_nodes=2)
