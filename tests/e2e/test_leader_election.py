"""Upstream E1-E2 "CD controller: leader election" (``test_cd_leader_election.bats``).

The chart's controller Deployment with ``controller.replicas=2`` on one simulated node, the
Lease ``compute-domains-controller`` in the driver namespace (upstream:
``dra-driver-nvidia-gpu-controller``), holder identity ``<pod-name>-<suffix>``. Upstream's
limits hold: both replicas Ready within 20 s; after a force-delete of the leader its pod is gone
within 15 s, the Lease moves to another pod within 20 s, and that pod is Ready within 20 s.

Beyond upstream (its E1 never checks "exactly one"): only the holder reconciles, so a
ComputeDomain created while both run appears in the leader's log and never in the standby's;
and one created after the takeover is reconciled by the new leader. The election logic itself
(expiry, graceful step-down, three candidates) is tested in
``tests/integration/controller/test_leader.py``; this module checks the chart-installed system.
"""

from __future__ import annotations

import pytest
from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from compute_domains.api import computedomain
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS

pytestmark = pytest.mark.timeout(900)
SHAPE = topology.Shape(racks=1, nodes_per_rack=1)
LEASE = "compute-domains-controller"


async def _controllers(admin: AsyncClient) -> list[Pod]:
    pods = [
        p
        async for p in admin.list(
            Pod, namespace=DRIVER_NS, labels={"app.kubernetes.io/component": "controller"}
        )
    ]
    return [p for p in pods if p.metadata and not p.metadata.deletionTimestamp]


async def _holder(admin: AsyncClient) -> str:
    lease = await admin.get(Lease, LEASE, namespace=DRIVER_NS)
    return str((lease.spec and lease.spec.holderIdentity) or "")


def _pod_of(holder: str, pods: list[Pod]) -> Pod | None:
    """The controller pod whose name prefixes the identity (upstream: ``<podname>-<uuid>``)."""
    return next(
        (p for p in pods if holder.startswith(f"{p.metadata.name}-")),  # type: ignore[union-attr]
        None,
    )


async def _reconciled(admin: AsyncClient, cd: str) -> bool:
    """The controller rendered the CD's workload ResourceClaimTemplate."""
    return not await helpers.gone(admin, ResourceClaimTemplate, f"{cd}-rct")


async def test_e1_exactly_one_leader_among_two_replicas(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    """E1 "CD controller: leader election: exactly one leader among two replicas"."""
    helpers.upgrade(rack_sim, "controller.replicas=2", "logVerbosity=debug")

    async def two_ready() -> bool:
        pods = await _controllers(admin)
        return len(pods) == 2 and all(helpers.ready(p) for p in pods)

    await helpers.within(20, two_ready, "both controller replicas Ready")

    async def a_current_pod_leads() -> bool:
        # Upstream sleeps 4 s here; the condition it waits for is that the Lease names one
        # of the two pods of this rollout (the one before the upgrade may still hold it).
        return _pod_of(await _holder(admin), await _controllers(admin)) is not None

    await helpers.within(60, a_current_pod_leads, "a controller pod of the rollout holds the Lease")
    holder = await _holder(admin)
    assert holder, "the Lease has no holder"
    pods = await _controllers(admin)
    leader = _pod_of(holder, pods)
    assert leader is not None, f"holder {holder!r} names no controller pod"
    assert leader.status is not None and leader.status.phase == "Running"

    uid = await helpers.create_cd(admin, "e1-leader-only")
    await helpers.within(30, lambda: _reconciled(admin, "e1-leader-only"), "CD reconciled")
    logs = await helpers.component_logs(admin, "controller")
    standby = next(name for name in logs if name != leader.metadata.name)  # type: ignore[union-attr]
    assert f"reconciling {uid}" in logs[str(leader.metadata.name)]  # type: ignore[union-attr]
    assert uid not in logs[standby], f"the standby touched the CD:\n{logs[standby]}"
    assert "became leader" not in logs[standby]
    await admin.delete(computedomain.ComputeDomainResource, "e1-leader-only", namespace="default")


async def test_e2_standby_acquires_lease_after_leader_is_force_deleted(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    """E2 "CD controller: leader election: standby acquires lease after leader is force-deleted"."""
    old = await _holder(admin)
    leader = _pod_of(old, await _controllers(admin))
    assert leader is not None and leader.metadata is not None
    name = str(leader.metadata.name)
    await admin.delete(Pod, name, namespace=DRIVER_NS, grace_period=0)
    await helpers.within(15, lambda: helpers.gone(admin, Pod, name, DRIVER_NS), "leader pod gone")

    async def moved() -> bool:
        holder = await _holder(admin)
        return bool(holder) and holder != old

    await helpers.within(20, moved, "the Lease moves to another identity")
    holder = await _holder(admin)
    new = _pod_of(holder, await _controllers(admin))
    assert new is not None, f"holder {holder!r} names no controller pod"
    assert new.metadata is not None and new.metadata.name != name
    new_name = str(new.metadata.name)
    await helpers.within(
        20, lambda: helpers.pod_ready(admin, new_name, DRIVER_NS), "new leader Ready"
    )
    new = await admin.get(Pod, new_name, namespace=DRIVER_NS)
    assert new.status is not None and new.status.phase == "Running"

    # The new leader does the work: a CD created now is reconciled.
    await helpers.create_cd(admin, "e2-after-takeover")
    await helpers.within(30, lambda: _reconciled(admin, "e2-after-takeover"), "CD reconciled")
    await admin.delete(
        computedomain.ComputeDomainResource, "e2-after-takeover", namespace="default"
    )
