"""The clique protocol's pure rules: registration, index stability, readiness, removal, peers."""

from __future__ import annotations

import dataclasses

import pytest

from compute_domains.api.clique import CliqueDaemon, CliqueFullError, ComputeDomainClique
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import cliqueentry
from compute_domains.daemon.config import Identity

CLIQUE_ID = "5b1c0d6e-0000-4000-8000-000000000001.7"


def _me(node: str = "n1", ip: str = "10.0.0.1", pod: str = "daemon-n1") -> Identity:
    return Identity(
        node_name=node,
        pod_name=pod,
        pod_namespace="driver",
        pod_uid=f"uid-{pod}",
        pod_ip=ip,
        clique_id=CLIQUE_ID,
        domain_uid="cd-uid",
    )


def _clique(*entries: tuple[str, str, int]) -> ComputeDomainClique:
    clique = ComputeDomainClique.new(domain_uid="cd-uid", clique_id=CLIQUE_ID, namespace="driver")
    daemons = tuple(
        CliqueDaemon(node_name=n, ip_address=ip, clique_id=CLIQUE_ID, index=i)
        for n, ip, i in entries
    )
    return dataclasses.replace(clique, daemons=daemons)


def _indices(clique: ComputeDomainClique) -> dict[str, int]:
    return {d.node_name: d.index for d in clique.daemons}


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ((), 0),
        ((("a", "10.0.0.10", 0), ("b", "10.0.0.11", 1)), 2),
        ((("a", "10.0.0.10", 0), ("c", "10.0.0.12", 2)), 1),
        ((("a", "10.0.0.10", 1),), 0),
    ],
    ids=["empty", "appends", "fills-gap", "lowest-first"],
)
def test_a_new_node_takes_the_lowest_free_index(
    entries: tuple[tuple[str, str, int], ...], expected: int
) -> None:
    got = cliqueentry.desired(_clique(*entries), _me(), 4, Readiness.NOT_READY)
    assert _indices(got)["n1"] == expected
    assert {k: v for k, v in _indices(got).items() if k != "n1"} == {n: i for n, _, i in entries}


def test_a_replacement_pod_on_the_same_node_keeps_the_index_and_starts_not_ready() -> None:
    old = _clique(("a", "10.0.0.10", 0), ("n1", "10.0.0.99", 1))
    old = old.with_status("n1", Readiness.READY)
    got = cliqueentry.desired(old, _me(ip="10.0.0.1", pod="daemon-n1-new"), 4, Readiness.NOT_READY)
    mine = got.daemon("n1")
    assert mine == CliqueDaemon(node_name="n1", ip_address="10.0.0.1", clique_id=CLIQUE_ID, index=1)
    assert _indices(got) == {"a": 0, "n1": 1}


def test_our_readiness_is_written_with_the_registration() -> None:
    got = cliqueentry.desired(_clique(), _me(), 4, Readiness.READY)
    assert got.daemon("n1") is not None
    assert got.daemon("n1").status is Readiness.READY  # type: ignore[union-attr]


def test_registering_adds_our_pod_as_a_plain_owner_once() -> None:
    once = cliqueentry.desired(_clique(), _me(), 4, Readiness.NOT_READY)
    twice = cliqueentry.desired(once, _me(), 4, Readiness.NOT_READY)
    assert twice.to_dict() == once.to_dict()
    refs = once.to_dict()["metadata"]["ownerReferences"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "daemon-n1", "uid": "uid-daemon-n1"}
    assert refs == [owner]


def test_a_full_clique_refuses_a_new_node_but_not_a_listed_one() -> None:
    full = _clique(("a", "10.0.0.10", 0), ("b", "10.0.0.11", 1))
    with pytest.raises(CliqueFullError):
        cliqueentry.desired(full, _me(), 2, Readiness.NOT_READY)
    got = cliqueentry.desired(full, _me(node="b", ip="10.0.0.50"), 2, Readiness.NOT_READY)
    assert _indices(got) == {"a": 0, "b": 1}


def test_our_entry_outside_a_lowered_maximum_is_registered_afresh() -> None:
    clique = _clique(("a", "10.0.0.10", 0), ("n1", "10.0.0.1", 5))
    got = cliqueentry.desired(clique, _me(), 3, Readiness.NOT_READY)
    assert _indices(got) == {"a": 0, "n1": 1}


def test_unchanged_registration_is_a_no_op() -> None:
    clique = cliqueentry.desired(_clique(("a", "10.0.0.10", 0)), _me(), 4, Readiness.NOT_READY)
    assert cliqueentry.desired(clique, _me(), 4, Readiness.NOT_READY).to_dict() == clique.to_dict()


@pytest.mark.parametrize(
    ("entries", "removed"),
    [
        ((("a", "10.0.0.10", 0), ("n1", "10.0.0.1", 1)), True),
        ((("a", "10.0.0.10", 0), ("n1", "10.0.0.77", 1)), False),
        ((("a", "10.0.0.10", 0),), False),
    ],
    ids=["ours", "taken-over-by-replacement", "absent"],
)
def test_deregistering_removes_only_our_own_entry(
    entries: tuple[tuple[str, str, int], ...], removed: bool
) -> None:
    got = cliqueentry.deregistered(_clique(*entries), _me())
    if not removed:
        assert got is None
        return
    assert got is not None
    assert _indices(got) == {"a": 0}


def test_is_registered_needs_our_node_and_our_ip() -> None:
    assert cliqueentry.is_registered(_clique(("n1", "10.0.0.1", 0)), _me())
    assert not cliqueentry.is_registered(_clique(("n1", "10.0.0.2", 0)), _me())
    assert not cliqueentry.is_registered(_clique(), _me())
    assert not cliqueentry.is_registered(None, _me())


def test_peer_mapping_maps_indices_to_ips_and_skips_unnameable_entries() -> None:
    clique = _clique(
        ("a", "10.0.0.10", 0),
        ("b", "10.0.0.11", 2),
        ("c", "10.0.0.12", 9),
        ("d", "not-an-ip", 3),
    )
    other = CliqueDaemon(node_name="e", ip_address="10.0.0.14", clique_id="x.1", index=1)
    clique = dataclasses.replace(clique, daemons=(*clique.daemons, other))
    mapping, problems = cliqueentry.peer_mapping(clique, CLIQUE_ID, 4)
    assert mapping == {0: "10.0.0.10", 2: "10.0.0.11"}
    assert len(problems) == 3
    assert any("index 9" in p for p in problems)
    assert any("invalid IP" in p for p in problems)
    assert any("not ours" in p for p in problems)


def test_peer_mapping_of_a_duplicate_index_keeps_the_first_node_by_name() -> None:
    clique = _clique(("b", "10.0.0.11", 0), ("a", "10.0.0.10", 0))
    mapping, problems = cliqueentry.peer_mapping(clique, CLIQUE_ID, 4)
    assert mapping == {0: "10.0.0.10"}
    assert problems == ["node b: index 0 is taken twice"]


def test_a_status_change_alone_is_a_guarded_patch_of_our_entry() -> None:
    me = _me()
    registered = cliqueentry.desired(
        _clique(("a", "10.0.0.10", 0), ("n1", "10.0.0.1", 1)), me, 4, Readiness.NOT_READY
    )
    assert cliqueentry.status_patch(registered, me, 4, Readiness.READY) == [
        {"op": "test", "path": "/daemons/1/nodeName", "value": "n1"},
        {"op": "test", "path": "/daemons/1/ipAddress", "value": "10.0.0.1"},
        {"op": "add", "path": "/daemons/1/status", "value": "Ready"},
    ]
    # Nothing to change, or more than the status: no patch (a full update, or nothing).
    assert cliqueentry.status_patch(registered, me, 4, Readiness.NOT_READY) is None
    moved = _me(ip="10.0.0.9")  # a replacement pod: the IP changes too
    assert cliqueentry.status_patch(registered, moved, 4, Readiness.READY) is None
    unregistered = _clique(("a", "10.0.0.10", 0))
    assert cliqueentry.status_patch(unregistered, me, 4, Readiness.READY) is None
    daemonset = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}
    assert cliqueentry.status_patch(registered, me, 4, Readiness.READY, daemonset) is None
