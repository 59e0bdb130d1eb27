"""A status pass grows linearly with the CD's nodes (issue 28 point 3: 4,608 nodes).

A pass looks at every entry; looking each one up by a scan of a list of all of them made the
pass quadratic (``bench/status_profile.py`` found 0.1 s of a 0.35 s pass at 4,608 nodes in one
such scan). These tests count the comparisons of node names, which are what a scan costs, at
two sizes four times apart: linear work grows four times, a scan per entry sixteen times. No
clock is read. Also here: the summaries of cached workload claims, made once per version.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import agentpods, conditions, names, sharedimex
from compute_domains.api.clique import CliqueDaemon, ComputeDomainClique
from compute_domains.api.computedomain import ComputeDomainNode, ComputeDomainStatus, Readiness
from compute_domains.controller import claims, notready, sharedstatus, status, statuschange

R, N = Readiness.READY, Readiness.NOT_READY
SMALL, BIG = 180, 720
LINEAR = 6
"""Allowed growth of the comparisons from SMALL to BIG nodes (4 is linear, 16 quadratic)."""


class _Count:
    """A factory of node names that count every equality test made on them."""

    def __init__(self) -> None:
        self.compared = 0
        counter = self

        class Name(str):
            __hash__ = str.__hash__

            def __eq__(self, other: object) -> bool:
                counter.compared += 1
                return str.__eq__(self, other)

            def __ne__(self, other: object) -> bool:
                counter.compared += 1
                return str.__ne__(self, other)

        self.name = Name

    def node(self, i: int) -> str:
        """A fresh name object for node ``i`` (each caller's own, as decoded objects are)."""
        return self.name(f"node-{i:05d}")


def _clique(count: _Count, c: int, n: int, ready: int) -> ComputeDomainClique:
    clique_id = f"cluster.{c}"
    base = ComputeDomainClique.new(domain_uid="uid", clique_id=clique_id, namespace="ns")
    daemons = tuple(
        CliqueDaemon(
            node_name=count.node(i),
            ip_address=f"10.0.{i // 256}.{i % 256}",
            clique_id=clique_id,
            index=i % 18,
            status=R if i < ready else N,
        )
        for i in range(c * 18, min(n, c * 18 + 18))
    )
    return dataclasses.replace(base, daemons=daemons)


def _forming(count: _Count, n: int, ready: int) -> ComputeDomainStatus:
    nodes = tuple(
        ComputeDomainNode(
            name=count.node(i),
            ip_address=f"10.0.{i // 256}.{i % 256}",
            clique_id=f"cluster.{i // 18}",
            index=i % 18,
            status=R if i < ready else N,
        )
        for i in range(n)
    )
    cond = conditions.Condition(
        type=conditions.READY, status=conditions.FALSE, reason=conditions.FORMING, message=""
    )
    return ComputeDomainStatus(status=N, nodes=nodes, conditions=(cond,))


def _workload(count: _Count, n: int) -> list[claims.WorkloadClaim]:
    return [
        claims.WorkloadClaim(namespace="ns", name=f"c-{i}", node=count.node(i)) for i in range(n)
    ]


def _mid_formation(n: int) -> int:
    """Comparisons of one ``status.derive`` while half the entries are Ready and one more
    turns Ready (the other half each asks whether it was a member)."""
    count = _Count()
    half = n // 2
    cliques = [_clique(count, c, n, half + 1) for c in range((n + 17) // 18)]
    pods = [
        status.DaemonPod(
            name=f"d-{i}",
            node_name=count.node(i),
            ip=f"10.0.{i // 256}.{i % 256}",
            ready=i <= half,
            clique_id=f"cluster.{i // 18}",
        )
        for i in range(n)
    ]
    previous = _forming(count, n, half)
    node_ready = {count.node(i): True for i in range(n)}
    workload = _workload(count, n)
    count.compared = 0
    derived = status.derive(
        num_nodes=n,
        cliques=cliques,
        pods=pods,
        node_ready=node_ready,
        workload=workload,
        previous=previous,
    )
    assert derived.status.ready_nodes == half + 1
    assert len(derived.why) == n - half - 1
    return count.compared


def test_derive_compares_node_names_linearly() -> None:
    small, big = _mid_formation(SMALL), _mid_formation(BIG)
    assert big <= LINEAR * small, (small, big)


def _shared_mid_formation(n: int) -> int:
    """Comparisons of one ``sharedstatus.derive`` of a per-clique CD forming on ``n`` nodes."""
    count = _Count()
    half = n // 2
    registries: dict[str, ComputeDomainClique] = {}
    for c in range((n + 17) // 18):
        clique = _clique(count, c, n, half + 1)
        meta = clique.metadata
        meta.name = sharedimex.registry_name(clique.clique_id)
        meta.labels = {names.CLIQUE_ID_LABEL: clique.clique_id}
        registries[clique.clique_id] = clique
    served = [
        sharedstatus.Served(name=count.node(i), clique_id=f"cluster.{i // 18}", channel=3)
        for i in range(n)
    ]
    agents = [
        agentpods.AgentPod(
            name=f"agent-{i}", node_name=count.node(i), ip=f"10.0.{i // 256}.{i % 256}", ready=True
        )
        for i in range(n)
    ]
    args: dict[str, Any] = {
        "num_nodes": n,
        "served": served,
        "registries": registries,
        "channels": {c: 3 for c in registries},
        "node_ready": {count.node(i): True for i in range(n)},
        "agents": agents,
        "workload": _workload(count, n),
        "previous": _forming(count, n, half),
    }
    count.compared = 0
    derived = sharedstatus.derive(**args)
    assert derived.status.ready_nodes == half + 1
    return count.compared


def test_a_per_clique_derive_compares_node_names_linearly() -> None:
    small, big = _shared_mid_formation(SMALL), _shared_mid_formation(BIG)
    assert big <= LINEAR * small, (small, big)


def _all_back(n: int) -> int:
    """Comparisons of ``statuschange.transitions`` when every member comes back Ready."""
    count = _Count()
    lost = conditions.Condition(
        type=conditions.READY,
        status=conditions.FALSE,
        reason=conditions.NODE_NOT_READY,
        message="",
    )
    old = dataclasses.replace(_forming(count, n, 0), conditions=(lost,))
    new = _forming(count, n, n)
    count.compared = 0
    changes = statuschange.transitions(old, status.Derived(status=new, why={}))
    assert len(changes) == n and {c.kind for c in changes} == {"ready"}
    return count.compared


def test_transitions_compare_node_names_linearly() -> None:
    small, big = _all_back(SMALL), _all_back(BIG)
    assert big <= LINEAR * small, (small, big)


def test_member_reads_the_same_with_and_without_the_lookup() -> None:
    count = _Count()
    previous = _forming(count, 40, 20)
    first = notready.by_name(previous)
    for i in range(45):
        name = count.node(i)
        assert notready.member(name, previous, first) == notready.member(name, previous)


def _claim(name: str, node: str, version: str) -> Any:
    params = {"kind": names.CHANNEL_CONFIG_KIND, "domainID": "uid"}
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return ResourceClaim.from_dict(
        {
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
            "spec": {
                "devices": {
                    "config": [{"opaque": {"driver": names.DRIVER_NAME, "parameters": params}}]
                }
            },
            "status": {"allocation": {"nodeSelector": {"nodeSelectorTerms": [selector]}}},
        }
    )


def test_a_cached_claim_is_summarised_once_per_version() -> None:
    summaries = claims.Summaries()
    first = _claim("c-1", "node-a", "1")
    one = summaries.of(first)
    assert one == claims.WorkloadClaim.from_claim(first)
    assert summaries.of(first) is one  # the same cached object: not read again
    moved = _claim("c-1", "node-b", "2")
    assert summaries.of(moved).node == "node-b"
    summaries.forget(moved)
    assert summaries.of(moved) is not summaries.of(first)
