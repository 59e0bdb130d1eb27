"""Central index assignment (pure): who asks for a slot, which index, and the guarded patch.

The patches are applied here with a small RFC 6902 applier (add, replace, remove, test), the
same operations the API server applies, so "applying the patch gives the planned clique" and
"another daemon's status write in between does not make it fail" are checked without a server
(tests/integration/daemon/test_daemon.py covers the real one).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lightkube.models.core_v1 import (
    ContainerState,
    ContainerStateRunning,
    ContainerStateWaiting,
    ContainerStatus,
    PodSpec,
    PodStatus,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.api import imexsignal, names
from compute_domains.api.clique import CliqueDaemon, ComputeDomainClique
from compute_domains.api.computedomain import Readiness
from compute_domains.controller import cliqueindex

CLIQUE = "5b1c0d6e-0000-4000-8000-000000000001.7"
DS = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "ds-uid"}


class PatchTestFailed(Exception):
    """A ``test`` operation failed or a path is missing (the API server answers 422)."""


def _walk(doc: Any, path: str) -> tuple[Any, str]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    for part in parts[:-1]:
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc, parts[-1]


def apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 (the subset we send) on a copy of ``doc``."""
    out = copy.deepcopy(doc)
    for op in ops:
        try:
            parent, key = _walk(out, op["path"])
        except (IndexError, KeyError) as err:  # the API server answers 422 too
            raise PatchTestFailed(op) from err
        if isinstance(parent, list):
            at = len(parent) if key == "-" else int(key)
            if op["op"] == "test":
                if at >= len(parent) or parent[at] != op["value"]:
                    raise PatchTestFailed(op)
            elif op["op"] == "add":
                parent.insert(at, copy.deepcopy(op["value"]))
            elif op["op"] == "replace":
                parent[at] = copy.deepcopy(op["value"])
            else:
                del parent[at]
        elif op["op"] == "test":
            if parent.get(key) != op["value"]:
                raise PatchTestFailed(op)
        elif op["op"] in ("add", "replace"):
            parent[key] = copy.deepcopy(op["value"])
        else:
            del parent[key]
    return out


def _clique(*entries: tuple[str, str, int], ready: bool = False) -> ComputeDomainClique:
    clique = ComputeDomainClique.new(domain_uid="cd-uid", clique_id=CLIQUE, namespace="driver")
    status = Readiness.READY if ready else Readiness.NOT_READY
    daemons = tuple(
        CliqueDaemon(node_name=n, ip_address=ip, clique_id=CLIQUE, index=i, status=status)
        for n, ip, i in entries
    )
    return dataclasses.replace(clique, daemons=daemons)


def _member(node: str, ip: str = "", pod: str = "") -> cliqueindex.Candidate:
    return cliqueindex.Candidate(
        pod_name=pod or f"daemon-{node}",
        pod_uid=f"uid-{pod or node}",
        node_name=node,
        ip=ip or f"10.0.0.{abs(hash(node)) % 250 + 1}",
        clique_id=CLIQUE,
    )


def _indices(clique: ComputeDomainClique) -> dict[str, int]:
    return {d.node_name: d.index for d in clique.daemons}


def _pod(
    name: str,
    node: str | None = "n1",
    ip: str | None = "10.0.0.1",
    clique: str | None = CLIQUE,
    *,
    deleting: bool = False,
    phase: str = "Running",
    created: int = 0,
) -> Pod:
    labels = {names.COMPUTE_DOMAIN_LABEL: "cd-uid"}
    if clique is not None:
        labels[names.CLIQUE_ID_LABEL] = clique
    at = datetime.datetime(2026, 12, 1, 12, 0, created, tzinfo=datetime.UTC)
    return Pod(
        metadata=ObjectMeta(
            name=name,
            uid=f"uid-{name}",
            labels=labels,
            creationTimestamp=at,
            deletionTimestamp=at if deleting else None,
        ),
        spec=PodSpec(containers=[], nodeName=node),
        status=PodStatus(podIP=ip, phase=phase),
    )


def test_only_labelled_placed_live_pods_with_an_ip_ask_for_a_slot() -> None:
    pods = [
        _pod("ok", node="n1"),
        _pod("no-label", node="n2", clique=None),
        _pod("non-fabric", node="n3", clique=""),
        _pod("no-ip", node="n4", ip=None),
        _pod("unscheduled", node=None),
        _pod("terminating", node="n5", deleting=True),
        _pod("done", node="n6", phase="Failed"),
    ]
    assert {k: [c.pod_name for c in v] for k, v in cliqueindex.candidates(pods).items()} == {
        CLIQUE: ["ok"]
    }


def test_the_newest_pod_of_a_node_is_its_candidate() -> None:
    pods = [_pod("new", ip="10.0.0.2", created=5), _pod("old", ip="10.0.0.1", created=1)]
    (found,) = cliqueindex.candidates(pods)[CLIQUE]
    assert (found.pod_name, found.ip) == ("new", "10.0.0.2")


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
    members = [_member(n, ip) for n, ip, _ in entries] + [_member("n1")]
    got = cliqueindex.assigned(_clique(*entries), members, 4).clique
    assert _indices(got)["n1"] == expected
    assert {k: v for k, v in _indices(got).items() if k != "n1"} == {n: i for n, _, i in entries}
    assert got.daemon("n1").status is Readiness.NOT_READY  # type: ignore[union-attr]


def test_a_replacement_pod_keeps_its_nodes_index_and_starts_not_ready() -> None:
    old = _clique(("a", "10.0.0.10", 0), ("n1", "10.0.0.1", 1), ready=True)
    got = cliqueindex.assigned(old, [_member("a", "10.0.0.10"), _member("n1", "10.0.0.99")], 4)
    mine = got.clique.daemon("n1")
    assert mine is not None and (mine.index, mine.ip_address) == (1, "10.0.0.99")
    assert mine.status is Readiness.NOT_READY  # the Ready was its predecessor's
    assert got.clique.daemon("a").status is Readiness.READY  # type: ignore[union-attr]


def test_remembered_nodes_get_their_index_back_whatever_the_order() -> None:
    before = _clique(("a", "1.0.0.1", 0), ("b", "1.0.0.2", 1), ("c", "1.0.0.3", 2))
    before = before.with_registered("a", "1.0.0.1", 4)  # memory: a=0, b=1, c=2
    for node in ("a", "b", "c"):
        before = before._remembering(node, before.daemon(node).index)  # type: ignore[union-attr]
    emptied = before.retaining_nodes([])
    # A newcomer and the three returning nodes in one pass, in any order.
    members = [_member("z"), _member("c"), _member("a"), _member("b")]
    for order in (members, list(reversed(members))):
        got = cliqueindex.assigned(emptied, order, 4).clique
        assert _indices(got) == {"a": 0, "b": 1, "c": 2, "z": 3}


def test_a_full_clique_reports_the_nodes_left_out_and_keeps_the_others() -> None:
    full = _clique(("a", "10.0.0.10", 0), ("b", "10.0.0.11", 1))
    members = [_member("a", "10.0.0.10"), _member("b", "10.0.0.11"), _member("c")]
    got = cliqueindex.assigned(full, members, 2)
    assert got.full == ("c",)
    assert _indices(got.clique) == {"a": 0, "b": 1}


def test_an_entry_outside_a_lowered_maximum_is_registered_afresh() -> None:
    clique = _clique(("a", "10.0.0.10", 0), ("n1", "10.0.0.1", 5))
    got = cliqueindex.assigned(clique, [_member("a", "10.0.0.10"), _member("n1", "10.0.0.1")], 3)
    assert _indices(got.clique) == {"a": 0, "n1": 1}
    ops = cliqueindex.patch_ops(clique, got.clique)
    assert _strip(apply(clique.to_dict(), ops)) == _strip(got.clique.to_dict())


def test_pods_and_the_daemonset_become_plain_owners_once() -> None:
    got = cliqueindex.assigned(_clique(), [_member("n1")], 4, DS).clique
    again = cliqueindex.assigned(got, [_member("n1")], 4, DS).clique
    owners = [r.to_dict() for r in again.metadata.ownerReferences or []]
    assert [o["kind"] for o in owners] == ["Pod", "DaemonSet"]
    assert not any(o.get("controller") for o in owners)
    assert cliqueindex.patch_ops(got, again) == []


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without the revision (which only the patch counts up)."""
    out = copy.deepcopy(doc)
    annotations = out["metadata"].get("annotations") or {}
    annotations.pop(names.INDEX_REVISION_ANNOTATION, None)
    if not annotations:
        out["metadata"].pop("annotations", None)
    return out


def test_the_patch_tests_the_revision_and_counts_it_up() -> None:
    current = cliqueindex.for_creation(_clique(("a", "10.0.0.10", 0)))
    want = cliqueindex.assigned(current, [_member("a", "10.0.0.10"), _member("b")], 4).clique
    ops = cliqueindex.patch_ops(current, want)
    rev = f"/metadata/annotations/{names.INDEX_REVISION_ANNOTATION.replace('/', '~1')}"
    assert ops[0] == {"op": "test", "path": rev, "value": "1"}
    written = apply(current.to_dict(), ops)
    assert written["metadata"]["annotations"][names.INDEX_REVISION_ANNOTATION] == "2"
    # A second writer planning from the same state fails its test instead of double-assigning.
    with pytest.raises(PatchTestFailed):
        apply(written, cliqueindex.patch_ops(current, want))


def test_daemons_status_writes_in_between_never_fail_the_patch() -> None:
    current = cliqueindex.for_creation(_clique(("a", "10.0.0.10", 0), ("n1", "10.0.0.1", 1)))
    members = [_member("a", "10.0.0.10"), _member("n1", "10.0.0.77"), _member("b")]
    want = cliqueindex.assigned(current, members, 4).clique
    ops = cliqueindex.patch_ops(current, want)
    stored = current.to_dict()
    stored["daemons"][0]["status"] = "Ready"  # daemon a's own status patch got there first
    written = apply(stored, ops)
    assert [(d["nodeName"], d["index"], d["status"]) for d in written["daemons"]] == [
        ("a", 0, "Ready"),
        ("n1", 1, "NotReady"),
        ("b", 2, "NotReady"),
    ]
    # A removal that shifted the entry edited in place makes it fail (the controller re-plans).
    shifted = current.to_dict()
    del shifted["daemons"][0]
    with pytest.raises(PatchTestFailed):
        apply(shifted, ops)


def test_removals_test_node_and_ip_and_go_last_position_first() -> None:
    clique = _clique(("a", "10.0.0.10", 0), ("b", "10.0.0.11", 1), ("c", "10.0.0.12", 2))
    ops = cliqueindex.removal_ops(clique, ["a", "c"])
    assert [o["path"] for o in ops if o["op"] == "remove"] == ["/daemons/2", "/daemons/0"]
    assert [d["nodeName"] for d in apply(clique.to_dict(), ops)["daemons"]] == ["b"]
    taken_over = clique.to_dict()
    taken_over["daemons"][2]["ipAddress"] = "10.0.0.99"  # a new daemon on c meanwhile
    with pytest.raises(PatchTestFailed):
        apply(taken_over, ops)
    assert cliqueindex.removal_ops(clique, ["zz"]) == []


_nodes = st.lists(st.sampled_from([f"n{i:02d}" for i in range(24)]), unique=True, max_size=24)


@settings(max_examples=150, deadline=None)
@given(existing=_nodes, joining=_nodes, max_nodes=st.integers(1, 18), seed=st.integers(0, 9))
def test_indices_stay_unique_in_range_and_kept_entries_never_move(
    existing: list[str], joining: list[str], max_nodes: int, seed: int
) -> None:
    rng = random.Random(seed)
    slots = rng.sample(range(max_nodes), min(len(existing), max_nodes))
    current = cliqueindex.for_creation(
        _clique(
            *(
                (n, f"10.1.0.{k + 1}", i)
                for k, (n, i) in enumerate(zip(existing, slots, strict=False))
            )
        )
    )
    members = [_member(n) for n in joining]
    rng.shuffle(members)
    got = cliqueindex.assigned(current, members, max_nodes)
    indices = [d.index for d in got.clique.daemons]
    assert len(indices) == len(set(indices)) and all(0 <= i < max_nodes for i in indices)
    for entry in current.daemons:  # nobody else's slot moves
        assert got.clique.daemon(entry.node_name).index == entry.index  # type: ignore[union-attr]
    placed = {d.node_name for d in got.clique.daemons}
    assert set(joining) <= placed | set(got.full)
    assert not got.full or len(got.clique.daemons) == max_nodes
    assert _strip(apply(current.to_dict(), cliqueindex.patch_ops(current, got.clique))) == _strip(
        got.clique.to_dict()
    )
    # The same members in another order: the same clique.
    again = cliqueindex.assigned(current, list(reversed(members)), max_nodes)
    assert again.clique.to_dict() == got.clique.to_dict()


# ---- the entries' status from the agents' IMEX readiness signals (docs/decisions/0025) -----

_STARTED = datetime.datetime(2026, 12, 1, 12, 0, 5, tzinfo=datetime.UTC)


def _agent_pod(
    node: str,
    ip: str,
    *,
    signal: float | None,
    declared: bool = True,
    running: bool = True,
) -> Pod:
    """A resident agent's pod serving ``cd-uid`` on ``node``: its container running since
    ``_STARTED``, its signal written ``signal`` seconds after that (None: none)."""
    pod = _pod(f"agent-{node}", node=node, ip=ip)
    notes = dict(imexsignal.DECLARED) if declared else {}
    if signal is not None:
        at = _STARTED + datetime.timedelta(seconds=signal)
        notes[imexsignal.key("cd-uid")] = imexsignal.encode(at, "i1")
    assert pod.metadata is not None and pod.status is not None and pod.spec is not None
    pod.metadata.namespace = "driver"
    pod.metadata.annotations = notes
    state = (
        ContainerState(running=ContainerStateRunning(startedAt=_STARTED))
        if running
        else ContainerState(waiting=ContainerStateWaiting(reason="CrashLoopBackOff"))
    )
    pod.status.containerStatuses = [
        ContainerStatus(
            name="agent", image="i", imageID="", ready=True, restartCount=0, state=state
        )
    ]
    return pod


def test_a_declaring_pods_signal_is_its_entrys_status_and_others_are_left_alone() -> None:
    pods = [
        _agent_pod("a", "10.0.0.10", signal=2.0),  # counts: Ready
        _agent_pod("b", "10.0.0.11", signal=None),  # no signal yet: NotReady
        _agent_pod("c", "10.0.0.12", signal=0.5),  # within its start's second: a predecessor's
        _agent_pod("d", "10.0.0.13", signal=2.0, running=False),  # its container restarts
        _agent_pod("e", "10.0.0.14", signal=None, declared=False),  # writes its own status
    ]
    members = cliqueindex.candidates(pods)[CLIQUE]
    signals = {m.node_name: m.signal for m in members}
    assert signals == {
        "a": Readiness.READY,
        "b": Readiness.NOT_READY,
        "c": Readiness.NOT_READY,
        "d": Readiness.NOT_READY,
        "e": None,
    }
    assert "previous process" in next(m.why for m in members if m.node_name == "c")
    # The stored clique says Ready for all five (b, c, d: left by earlier processes, e: its own).
    before = _clique(
        ("a", "10.0.0.10", 0),
        ("b", "10.0.0.11", 1),
        ("c", "10.0.0.12", 2),
        ("d", "10.0.0.13", 3),
        ("e", "10.0.0.14", 4),
        ready=True,
    )
    after = cliqueindex.assigned(before, members, 18).clique
    got = {d.node_name: d.status for d in after.daemons}
    assert got == {
        "a": Readiness.READY,
        "b": Readiness.NOT_READY,
        "c": Readiness.NOT_READY,
        "d": Readiness.NOT_READY,
        "e": Readiness.READY,  # untouched: not the controller's to write
    }
    assert _indices(after) == _indices(before)


def test_a_cliques_signals_become_one_guarded_patch() -> None:
    nodes = [f"n{i:02d}" for i in range(18)]
    before = _clique(*((n, f"10.0.1.{i}", i) for i, n in enumerate(nodes)))
    before = before.with_annotation(names.INDEX_REVISION_ANNOTATION, "3")
    pods = [_agent_pod(n, f"10.0.1.{i}", signal=3.0) for i, n in enumerate(nodes)]
    after = cliqueindex.assigned(before, cliqueindex.candidates(pods)[CLIQUE], 18).clique
    ops = cliqueindex.patch_ops(before, after)
    written = ComputeDomainClique.from_dict(apply(before.to_dict(), ops))
    assert {d.status for d in written.daemons} == {Readiness.READY}
    assert _indices(written) == _indices(before)
    # One write: the revision tested and counted up once.
    assert ops[0] == {
        "op": "test",
        "path": "/metadata/annotations/" + names.INDEX_REVISION_ANNOTATION.replace("/", "~1"),
        "value": "3",
    }
    assert cliqueindex.revision(written) == 4
    # Nothing left to write once they are Ready.
    again = cliqueindex.assigned(written, cliqueindex.candidates(pods)[CLIQUE], 18).clique
    assert cliqueindex.patch_ops(written, again) == []
