"""ComputeDomainClique: naming, stable index membership, owners, wire form."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from lightkube.core.resource import NamespacedResource, api_info

from compute_domains.api import names
from compute_domains.api.clique import (
    CliqueDaemon,
    CliqueFullError,
    ComputeDomainClique,
    ComputeDomainCliqueResource,
)
from compute_domains.api.computedomain import ComputeDomainNode, DecodeError, Readiness
from compute_domains.infra.errors import TemporaryError

from . import strategies

CLIQUE_ID = "9f0a33c5-7c34-4c8e-b8a1-1d2f0e6a5b77.3"


def _clique(*nodes: str) -> ComputeDomainClique:
    clique = ComputeDomainClique.new(domain_uid="cd-uid", clique_id=CLIQUE_ID, namespace="driver")
    for i, node in enumerate(nodes):
        clique = clique.with_registered(node, f"10.0.0.{i}")
    return clique


def _indices(clique: ComputeDomainClique) -> dict[str, int]:
    return {d.node_name: d.index for d in clique.daemons}


def test_new_clique_is_named_and_labelled_like_upstream() -> None:
    clique = _clique()
    assert clique.name == f"cd-uid.{CLIQUE_ID}"
    assert clique.namespace == "driver"
    assert clique.metadata.labels == {
        "resource.nvidia.com/computeDomain": "cd-uid",
        "resource.nvidia.com/computeDomain.cliqueID": CLIQUE_ID,
    }
    assert (clique.domain_uid, clique.clique_id) == ("cd-uid", CLIQUE_ID)
    assert clique.daemons == ()


def test_new_daemons_get_the_lowest_free_index_and_start_not_ready() -> None:
    clique = _clique("a", "b", "c")
    assert _indices(clique) == {"a": 0, "b": 1, "c": 2}
    assert all(d.status is Readiness.NOT_READY for d in clique.daemons)
    assert all(d.clique_id == CLIQUE_ID for d in clique.daemons)


def test_reregistering_keeps_the_index_and_refreshes_the_ip() -> None:
    clique = _clique("a", "b").with_registered("a", "10.9.9.9")
    assert _indices(clique) == {"a": 0, "b": 1}
    assert clique.daemon("a") == CliqueDaemon(
        node_name="a", ip_address="10.9.9.9", clique_id=CLIQUE_ID, index=0
    )


def test_freed_indices_are_refilled_and_remaining_peers_keep_theirs() -> None:
    clique = _clique("a", "b", "c").retaining_nodes(["a", "c"]).with_registered("d", "10.0.0.4")
    assert _indices(clique) == {"a": 0, "c": 2, "d": 1}


def test_daemons_replaced_all_at_once_rejoin_on_their_own_indices() -> None:
    # Upstream C2: every daemon of the domain force-deleted; their entries left, and the
    # replacements register in another order than the first time.
    formed = _clique("a", "b", "c")
    empty = formed.retaining_nodes([])
    rejoined = empty.with_registered("a", "10.1.0.0")
    rejoined = rejoined.with_registered("c", "10.1.0.2").with_registered("b", "10.1.0.1")
    assert _indices(rejoined) == {"a": 0, "b": 1, "c": 2}


def test_a_remembered_index_taken_meanwhile_falls_back_to_the_lowest_free() -> None:
    clique = _clique("a", "b").retaining_nodes(["a"]).with_registered("d", "10.0.0.4")
    assert _indices(clique) == {"a": 0, "d": 1}
    clique = clique.with_registered("b", "10.0.0.9")
    assert _indices(clique) == {"a": 0, "d": 1, "b": 2}
    assert clique.remembered_indices() == {"a": 0, "b": 2, "d": 1}


def test_an_unreadable_memory_is_ignored() -> None:
    clique = _clique("a")
    meta = clique.metadata.to_dict()
    meta["annotations"] = {"resource.nvidia.com/lastIndices": "{not json"}
    broken = ComputeDomainClique.from_dict({**clique.to_dict(), "metadata": meta})
    assert broken.remembered_indices() == {}
    assert _indices(broken.retaining_nodes([]).with_registered("z", "10.0.0.7")) == {"z": 0}


@pytest.mark.parametrize("max_nodes", [1, 2, 18], ids=["one", "two", "default"])
def test_a_full_clique_refuses_a_new_node_with_a_retryable_error(max_nodes: int) -> None:
    clique = _clique()
    for i in range(max_nodes):
        clique = clique.with_registered(f"n{i}", f"ip{i}", max_nodes)
    assert clique.lowest_free_index(max_nodes) is None
    with pytest.raises(CliqueFullError, match="no available indices") as info:
        clique.with_registered("late", "ip", max_nodes)
    assert isinstance(info.value, TemporaryError)
    assert clique.with_registered("n0", "new-ip", max_nodes).daemon("n0") is not None


def test_status_updates_only_listed_daemons() -> None:
    clique = _clique("a", "b").with_status("b", Readiness.READY)
    assert [d.status for d in clique.daemons] == [Readiness.NOT_READY, Readiness.READY]
    with pytest.raises(TemporaryError, match="not yet listed"):
        clique.with_status("zzz", Readiness.READY)


def test_pruning_keeps_only_nodes_that_still_run_a_daemon() -> None:
    assert _indices(_clique("a", "b", "c").retaining_nodes({"a", "c", "x"})) == {"a": 0, "c": 2}


def test_owners_are_appended_once_per_pod_and_never_as_controller() -> None:
    clique = _clique().with_owner("pod-a", "uid-a").with_owner("pod-b", "uid-b")
    assert clique.with_owner("pod-a", "uid-a") == clique
    assert clique.to_dict()["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "pod-a", "uid": "uid-a"},
        {"apiVersion": "v1", "kind": "Pod", "name": "pod-b", "uid": "uid-b"},
    ]


def test_methods_never_mutate_the_original() -> None:
    clique = _clique("a")
    before = clique.to_dict()
    clique.with_owner("p", "u").with_registered("b", "ip").with_status("a", Readiness.READY)
    assert clique.to_dict() == before


def test_daemons_convert_to_compute_domain_nodes() -> None:
    clique = _clique("a").with_status("a", Readiness.READY)
    assert clique.to_nodes() == (
        ComputeDomainNode(
            name="a", ip_address="10.0.0.0", clique_id=CLIQUE_ID, index=0, status=Readiness.READY
        ),
    )


def test_wire_form_omits_empty_daemons_and_always_writes_index() -> None:
    assert "daemons" not in _clique().to_dict()
    assert _clique("a").to_dict()["daemons"] == [
        {
            "nodeName": "a",
            "ipAddress": "10.0.0.0",
            "cliqueID": CLIQUE_ID,
            "index": 0,
            "status": "NotReady",
        }
    ]


@pytest.mark.parametrize(
    ("daemons", "message"),
    [
        (
            [{"nodeName": "a", "ipAddress": "i", "cliqueID": "c", "index": "0"}],
            "daemons[0].index: expected integer, got string",
        ),
        ([{"nodeName": "a", "ipAddress": "i"}], "daemons[0].cliqueID: required field missing"),
        (
            [{"nodeName": "a", "ipAddress": "i", "cliqueID": "c", "status": "Up"}],
            'daemons[0].status: unsupported value "Up"',
        ),
        ({"a": 1}, "daemons: expected array, got object"),
    ],
    ids=["index-string", "missing-clique-id", "unknown-status", "not-a-list"],
)
def test_malformed_daemons_are_rejected_with_their_path(daemons: Any, message: str) -> None:
    obj = {**_clique().to_dict(), "daemons": daemons}
    with pytest.raises(DecodeError) as info:
        ComputeDomainClique.from_dict(obj)
    assert message in str(info.value)


def test_resource_class_is_namespaced() -> None:
    info = api_info(ComputeDomainCliqueResource)
    assert issubclass(ComputeDomainCliqueResource, NamespacedResource)
    assert (info.resource.kind, info.plural) == (names.CLIQUE_KIND, "computedomaincliques")
    clique = _clique("a")
    assert ComputeDomainClique.from_resource(clique.to_resource()) == clique


@settings(max_examples=60, deadline=None)
@given(strategies.cliques)
def test_cliques_round_trip_through_json(clique: ComputeDomainClique) -> None:
    wire = json.loads(json.dumps(clique.to_dict()))
    assert ComputeDomainClique.from_dict(wire) == clique
    assert ComputeDomainClique.from_dict(wire).to_dict() == wire


def test_a_second_owner_is_added_once() -> None:
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "name": "computedomain-daemon-x",
        "uid": "ds-uid",
    }
    clique = _clique("a").with_owner("pod-a", "pod-uid").with_owner_ref(ds).with_owner_ref(ds)
    refs = [r.to_dict() for r in clique.metadata.ownerReferences or []]
    assert [(r["kind"], r["uid"]) for r in refs] == [("Pod", "pod-uid"), ("DaemonSet", "ds-uid")]
    assert not any(r.get("controller") for r in refs)
