"""The formation observer's per-pod and per-entry times: the formation curve's points.

Events are fed by hand, as the watches would deliver them, on a clock the test sets.
"""

from __future__ import annotations

from typing import Any

from lightkube.models.core_v1 import (
    ContainerState,
    ContainerStateRunning,
    ContainerStatus,
    PodCondition,
    PodSpec,
    PodStatus,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.api import sharedimex
from compute_domains.bench import observe


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _observer(clock: _Clock, pods: int, nodes: int | None = None) -> observe.Observer:
    return observe.Observer(
        None,  # type: ignore[arg-type]  (no watch is started: events are fed by hand)
        pods,
        nodes=nodes,
        ns="default",
        driver_ns="compute-domains",
        name="bench",
        uid="uid-1",
        t0=100.0,
        clock=clock,
    )


def _pod(name: str, node: str = "", *, running: bool = False, ready: bool = False) -> Pod:
    state = ContainerState(running=ContainerStateRunning()) if running else ContainerState()
    return Pod(
        metadata=ObjectMeta(name=name),
        spec=PodSpec(containers=[], nodeName=node or None),
        status=PodStatus(
            containerStatuses=[
                ContainerStatus(
                    name="c", image="i", imageID="", ready=ready, restartCount=0, state=state
                )
            ],
            conditions=[PodCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


def _clique(name: str, ready: list[str], not_ready: list[str] = []) -> dict[str, Any]:  # noqa: B006
    daemons = [{"nodeName": n, "status": "Ready"} for n in ready]
    daemons += [{"nodeName": n, "status": "NotReady"} for n in not_ready]
    return {"metadata": {"name": name}, "daemons": daemons}


def test_each_workload_pods_first_running_time_is_a_point() -> None:
    clock = _Clock()
    obs = _observer(clock, 3)
    store = obs._pod_store(obs._workloads, "workloads_running", "running")
    clock.now = 100.5
    store("ADDED", _pod("w0", "n0"))  # scheduled, not running: no point yet
    clock.now = 103.25
    store("MODIFIED", _pod("w2", "n2", running=True))
    clock.now = 101.5
    store("MODIFIED", _pod("w0", "n0", running=True))
    clock.now = 104.0
    store("MODIFIED", _pod("w0", "n0", running=True, ready=True))  # later event: time kept
    store("MODIFIED", _pod("w1", "n1", running=True, ready=True))  # seen Ready at once
    assert obs.curves()["workloads_running"] == [1.5, 3.25, 4.0]


def test_daemon_pods_count_when_ready_not_when_running() -> None:
    clock = _Clock()
    obs = _observer(clock, 2)
    store = obs._pod_store(obs._daemons, "daemons_ready", "ready")
    clock.now = 101.0
    store("MODIFIED", _pod("d0", "n0", running=True))
    clock.now = 102.0
    store("MODIFIED", _pod("d1", "n1", running=True, ready=True))
    clock.now = 107.125
    store("MODIFIED", _pod("d0", "n0", running=True, ready=True))
    assert obs.curves()["daemons_ready"] == [2.0, 7.125]
    assert obs.curves()["workloads_running"] == []


def test_clique_entries_count_once_when_ready() -> None:
    clock = _Clock()
    obs = _observer(clock, 3)
    clock.now = 102.0
    obs._clique_store("ADDED", _clique("uid-1.c1", ["n1"], ["n0", "n2"]))
    clock.now = 105.0
    obs._clique_store("MODIFIED", _clique("uid-1.c1", ["n1", "n0"], ["n2"]))
    obs._clique_store("MODIFIED", _clique("other-cd.c1", ["n7"]))  # another CD's clique
    clock.now = 106.0
    obs._clique_store("MODIFIED", _clique("uid-1.c1", ["n0", "n1", "n2"]))
    assert obs.curves()["entries_ready"] == [2.0, 5.0, 6.0]


def test_per_clique_counts_only_the_domains_nodes_registry_entries() -> None:
    clock = _Clock()
    obs = _observer(clock, 2)
    registry = sharedimex.registry_name("c.1")
    clock.now = 100.0625
    # The clique's registry lists all of its 18 nodes, Ready before the apply.
    obs._clique_store("ADDED", _clique(registry, [f"n{i}" for i in range(18)]))
    obs._cd_store(
        "ADDED",
        {"metadata": {"annotations": {sharedimex.FIXED_SCOPE_ANNOTATION: "perClique"}}},
    )
    store = obs._pod_store(obs._workloads, "workloads_running", "running")
    clock.now = 101.0
    store("ADDED", _pod("w0", "n3"))
    store("ADDED", _pod("w1", "n5"))
    assert obs.curves()["entries_ready"] == [0.062, 0.062]  # to the millisecond


def test_per_domain_ignores_the_registries() -> None:
    clock = _Clock()
    obs = _observer(clock, 1)
    obs._clique_store("ADDED", _clique(sharedimex.registry_name("c.1"), ["n0"]))
    obs._pod_store(obs._workloads, "workloads_running", "running")("ADDED", _pod("w0", "n0"))
    assert obs.curves()["entries_ready"] == []


def _claim(name: str, *, allocated: bool) -> Any:
    from lightkube.models.resource_v1 import (
        AllocationResult,
        DeviceAllocationResult,
        ResourceClaimSpec,
        ResourceClaimStatus,
    )
    from lightkube.resources.resource_v1 import ResourceClaim

    allocation = AllocationResult(devices=DeviceAllocationResult(results=[]))
    return ResourceClaim(
        metadata=ObjectMeta(name=name),
        spec=ResourceClaimSpec(),
        status=ResourceClaimStatus(allocation=allocation) if allocated else ResourceClaimStatus(),
    )


def test_claims_marks_split_the_scheduling_into_creation_and_allocation() -> None:
    """Issue 28 point 4: the claims' share of the scheduling is told apart: when every pod's
    claim exists (the resourceclaim controller's work) and when every one is allocated (the
    scheduler's DRA allocation); a claim deleted meanwhile no longer counts."""
    clock = _Clock()
    obs = _observer(clock, pods=2)
    clock.now = 101.0
    obs._claim_store("ADDED", _claim("a", allocated=False))
    obs._evaluate()
    assert "claims_created" not in obs.marks
    clock.now = 101.5
    obs._claim_store("ADDED", _claim("b", allocated=False))
    obs._evaluate()
    assert obs.marks["claims_created"] == 1.5
    assert "claims_allocated" not in obs.marks
    clock.now = 102.0
    obs._claim_store("MODIFIED", _claim("a", allocated=True))
    obs._claim_store("DELETED", _claim("b", allocated=False))
    obs._evaluate()
    assert "claims_allocated" not in obs.marks, "one of two claims is gone, not allocated"
    clock.now = 103.0
    obs._claim_store("ADDED", _claim("b", allocated=True))
    obs._evaluate()
    assert obs.marks["claims_allocated"] == 3.0


def test_progress_says_how_far_the_formation_got() -> None:
    """Printed every 15 s while a formation runs: a run cut by time (the 4,608-node run of
    issue 28) otherwise left nothing of how far it got."""
    clock = _Clock()
    obs = _observer(clock, pods=3)
    store = obs._pod_store(obs._workloads, "workloads_running", "running")
    store("ADDED", _pod("w0"))  # created, not scheduled
    store("ADDED", _pod("w1", "n1"))  # scheduled
    store("ADDED", _pod("w2", "n2", running=True))
    obs._claim_store("ADDED", _claim("a", allocated=True))
    obs._claim_store("ADDED", _claim("b", allocated=False))
    obs._clique_store("ADDED", _clique("uid-1.c1", ["n2"], ["n1"]))
    obs._cd_store("ADDED", {"status": {"status": "NotReady"}})
    clock.now = 145.4
    assert obs.progress() == (
        "45s; pods 3/3 created, 2 scheduled, 1 running; claims 2 created, 1 allocated; "
        "entries 1/3 Ready; CD NotReady"
    )
