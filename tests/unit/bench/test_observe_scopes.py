"""The formation observer's milestones in the per-clique scope: the shared registry's entries
stand for the daemons and the clique (no pod, no clique object is made for such a CD); and
without any CD (``--workload affinity|plain``): the workload's milestones only."""

from __future__ import annotations

from typing import Any

from compute_domains.api import sharedimex
from compute_domains.bench import observe


def _observer(nodes: int) -> observe.Observer:
    return observe.Observer(
        None,  # type: ignore[arg-type]  (no watch is started: events are fed by hand)
        nodes,
        ns="default",
        driver_ns="compute-domains",
        name="bench",
        uid="uid-1",
        t0=0.0,
    )


def _registry(ready: int, total: int) -> dict[str, Any]:
    daemons = [
        {"nodeName": f"n{i}", "status": "Ready" if i < ready else "NotReady"} for i in range(total)
    ]
    return {"metadata": {"name": sharedimex.registry_name("c.1")}, "daemons": daemons}


def _cd(scope: str, ready: bool, nodes: int) -> dict[str, Any]:
    status = {"status": "Ready" if ready else "NotReady", "nodes": [{}] * nodes}
    annotations = {sharedimex.FIXED_SCOPE_ANNOTATION: scope}
    return {"metadata": {"name": "bench", "annotations": annotations}, "status": status}


def _feed(obs: observe.Observer, workloads: int) -> None:
    obs._evaluate()
    for i in range(workloads):
        obs._workloads[f"w{i}"] = "ready"
    obs._evaluate()


def test_a_per_clique_cd_forms_on_the_registry_entries() -> None:
    obs = _observer(4)
    obs._clique_store("ADDED", _registry(ready=3, total=18))
    obs._cd_store("ADDED", _cd("perClique", ready=True, nodes=4))
    _feed(obs, 4)
    assert not obs.done.is_set()  # 3 Ready entries are not 4 nodes' IMEX
    obs._clique_store("MODIFIED", _registry(ready=18, total=18))
    obs._evaluate()
    assert obs.done.is_set() and {"daemons", "cliques", "cd", "workloads"} <= set(obs.marks)


def test_a_per_domain_cd_ignores_the_registries() -> None:
    obs = _observer(4)
    obs._clique_store("ADDED", _registry(ready=18, total=18))
    obs._cd_store("ADDED", _cd("perDomain", ready=True, nodes=4))
    _feed(obs, 4)
    assert not obs.done.is_set() and "daemons" not in obs.marks and "cliques" not in obs.marks


def test_without_a_domain_only_the_workload_is_awaited_and_no_cd_mark_is_made() -> None:
    obs = observe.Observer(
        None,  # type: ignore[arg-type]  (no watch is started: events are fed by hand)
        4,
        ns="default",
        driver_ns="compute-domains",
        name="bench",
        uid=None,
        t0=0.0,
    )
    # A clique of some other domain, with Ready entries, is not this run's.
    obs._clique_store("ADDED", {"metadata": {"name": "other-uid.c"}, "daemons": [{}] * 4})
    for i in range(3):
        obs._workloads[f"w{i}"] = "ready"
    obs._workloads["w3"] = "scheduled"
    obs._evaluate()
    assert not obs.done.is_set()
    assert "workloads_scheduled" in obs.marks and "workloads" not in obs.marks
    obs._workloads["w3"] = "ready"
    obs._evaluate()
    assert obs.done.is_set()
    assert {m.split("_")[0] for m in obs.marks} == {"workloads"}  # no daemon, clique or CD mark
