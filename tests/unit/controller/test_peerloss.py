"""Members whose IMEX peers lost them: reports read from the clique, judged, in the status."""

from __future__ import annotations

import json

import pytest

from compute_domains.api import conditions, names
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import Readiness
from compute_domains.controller import claims, notready, peerloss, status

UID = "cd-uid"
C1 = "cluster.1"
NODES = ("a", "b", "c")
SINCE = "2026-12-02T05:00:00Z"


def _clique(reports: dict[str, list[str]], *, stale: bool = False) -> ComputeDomainClique:
    clique = ComputeDomainClique.new(domain_uid=UID, clique_id=C1, namespace="ns")
    for i, node in enumerate(NODES):
        clique = clique.with_registered(node, f"10.0.0.{i}").with_status(node, Readiness.READY)
    for reporter, lost in reports.items():
        index = NODES.index(reporter)
        ip = "10.9.9.9" if stale else f"10.0.0.{index}"
        value = {"node": reporter, "ip": ip, "lost": dict.fromkeys(lost, SINCE)}
        clique = clique.with_annotation(
            f"{names.LOST_PEERS_ANNOTATION_PREFIX}{index}", json.dumps(value)
        )
    return clique


@pytest.mark.parametrize(
    ("found", "ready", "unreachable"),
    [
        ({"a": ["c"]}, {}, {"c"}),  # c died: one live peer says so
        ({"a": ["b", "c"]}, {}, {"b", "c"}),  # two died at once
        ({"a": ["b", "c"], "b": ["a"], "c": ["a"]}, {}, {"a"}),  # a's own network broke
        ({"a": ["c"]}, {"a": False}, set()),  # a reporter that is itself down does not count
        ({"a": ["b"], "b": ["a"]}, {"c": False}, {"a", "b"}),  # two that lost each other
        ({}, {}, set()),
    ],
)
def test_judge(found: dict[str, list[str]], ready: dict[str, bool], unreachable: set[str]) -> None:
    reports = {r: dict.fromkeys(lost, SINCE) for r, lost in found.items()}
    readiness = {n: ready.get(n, True) for n in NODES}
    assert set(peerloss.judge(reports, NODES, readiness)) == unreachable


def test_a_report_counts_only_from_the_entry_that_wrote_it() -> None:
    assert peerloss.reports(_clique({"a": ["c"]})) == {"a": {"c": SINCE}}
    assert peerloss.reports(_clique({"a": ["c"]}, stale=True)) == {}


def _derive(clique: ComputeDomainClique) -> status.Derived:
    return status.derive(
        num_nodes=0,
        cliques=[clique],
        pods=[
            status.DaemonPod(name=f"p-{n}", node_name=n, ip=f"10.0.0.{i}", ready=True, clique_id=C1)
            for i, n in enumerate(NODES)
        ],
        node_ready=dict.fromkeys(NODES, True),
        workload=[claims.WorkloadClaim(namespace="ns", name=f"c-{n}", node=n) for n in NODES],
    )


def test_a_member_its_peers_lost_is_not_ready_with_peer_unreachable() -> None:
    assert _derive(_clique({})).status.status is Readiness.READY  # control
    derived = _derive(_clique({"a": ["c"], "b": ["c"]}))
    st = derived.status
    assert st.status is Readiness.NOT_READY
    assert {n.name: n.status for n in st.nodes}["c"] is Readiness.NOT_READY
    cond = st.condition(conditions.READY)
    assert cond is not None and cond.reason == "PeerUnreachable"
    assert "node c: its IMEX peers lost their links to it: a, b (since " + SINCE in cond.message
    # A Ready member of the previous status that turns NotReady so is a member that went away.
    assert notready.member("c", st)
