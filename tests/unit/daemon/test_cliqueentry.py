"""The daemon's pure clique rules: registered or left out, its readiness and removal patches,
peers (the index choice is the controller's: tests/unit/controller/test_cliqueindex.py)."""

from __future__ import annotations

import dataclasses

import pytest

from compute_domains.api.clique import CliqueDaemon, ComputeDomainClique
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
    ("entries", "patched"),
    [
        ((("a", "10.0.0.10", 0), ("n1", "10.0.0.1", 1)), True),
        ((("a", "10.0.0.10", 0), ("n1", "10.0.0.77", 1)), False),
        ((("a", "10.0.0.10", 0),), False),
    ],
    ids=["ours", "taken-over-by-replacement", "absent"],
)
def test_deregistering_removes_only_our_own_entry(
    entries: tuple[tuple[str, str, int], ...], patched: bool
) -> None:
    ops = cliqueentry.removal_patch(_clique(*entries), _me())
    if not patched:
        assert ops is None
        return
    assert ops == [
        {"op": "test", "path": "/daemons/1/nodeName", "value": "n1"},
        {"op": "test", "path": "/daemons/1/ipAddress", "value": "10.0.0.1"},
        {"op": "remove", "path": "/daemons/1"},
    ]


def test_a_clique_full_without_us_leaves_us_out() -> None:
    full = _clique(("a", "10.0.0.10", 0), ("b", "10.0.0.11", 1))
    assert cliqueentry.is_left_out(full, _me(), 2)
    assert not cliqueentry.is_left_out(full, _me(), 3)
    assert not cliqueentry.is_left_out(
        _clique(("a", "10.0.0.10", 0), ("n1", "10.0.0.1", 1)), _me(), 2
    )
    assert not cliqueentry.is_left_out(None, _me(), 2)
    # Entries outside the range free no slot, but take none either.
    assert not cliqueentry.is_left_out(
        _clique(("a", "10.0.0.10", 0), ("b", "10.0.0.11", 7)), _me(), 2
    )


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


def test_a_status_change_is_a_guarded_patch_of_our_entry_only() -> None:
    me = _me()
    registered = _clique(("a", "10.0.0.10", 0), ("n1", "10.0.0.1", 1))
    assert cliqueentry.status_patch(registered, me, Readiness.READY) == [
        {"op": "test", "path": "/daemons/1/nodeName", "value": "n1"},
        {"op": "test", "path": "/daemons/1/ipAddress", "value": "10.0.0.1"},
        {"op": "add", "path": "/daemons/1/status", "value": "Ready"},
    ]
    # Nothing to change, an entry that is not ours (a replacement's IP), or none: no patch.
    assert cliqueentry.status_patch(registered, me, Readiness.NOT_READY) is None
    assert cliqueentry.status_patch(registered, _me(ip="10.0.0.9"), Readiness.READY) is None
    assert cliqueentry.status_patch(_clique(("a", "10.0.0.10", 0)), me, Readiness.READY) is None
