"""Leader election with two (then three) controller instances sharing one Lease.

Only the leader reconciles. When the leader dies without a word (its task cancelled with
``release_on_cancel`` off, as after a crash), a standby takes over once the Lease expires; when
it steps down gracefully, a standby takes over at once. Takeover times are printed for the
record, not asserted (the bound is generous).
"""

from __future__ import annotations

import asyncio
import time

from lightkube import AsyncClient
from lightkube.resources.coordination_v1 import Lease

from compute_domains import controller
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.sim import state
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController, settings_for, stop
from tests.integration.helpers import wait_for

LEASE = "cd-test-leader"


def _settings(
    sim: state.SimPaths, ns: str, identity: str, *, release: bool
) -> controller.ControllerSettings:
    return settings_for(
        sim,
        ns,
        leader_election=controller.LeaderElectionSettings(
            enabled=True, lease_name=LEASE, identity=identity, release_on_cancel=release
        ),
    )


async def _takeover(standby: controller.Controller, timeout: float = 90) -> float:
    started = time.monotonic()
    await asyncio.wait_for(standby.leading.wait(), timeout)
    return time.monotonic() - started


async def test_standby_takes_over_after_leader_dies_or_steps_down(
    client: AsyncClient,
    sim: state.SimPaths,
    driver_ns: str,
    user_ns: str,
    start_controller: StartController,
) -> None:
    tasks = start_controller.tasks  # type: ignore[attr-defined]
    leader = await start_controller(settings=_settings(sim, driver_ns, "a", release=False))
    standby = await start_controller(
        settings=_settings(sim, driver_ns, "b", release=True), wait_leading=False
    )
    lease = await client.get(Lease, LEASE, namespace=driver_ns)
    assert lease.spec.holderIdentity == leader.identity

    await objects.create_cd(client, "cd-l1", user_ns, "cd-l1-channel")
    await wait_for(
        client, ComputeDomainResource, "cd-l1", lambda c: bool(c.get("status")), namespace=user_ns
    )
    assert not standby.leading.is_set()

    # The leader dies without releasing: the standby waits out the lease, then leads.
    await stop(tasks[leader])
    waited = await _takeover(standby)
    print(f"takeover after an unannounced death: {waited:.1f}s")
    lease = await client.get(Lease, LEASE, namespace=driver_ns)
    assert lease.spec.holderIdentity == standby.identity
    # One change of holder since the lease was created (by the first leader, at 0).
    assert lease.spec.leaseTransitions == 1
    await objects.create_cd(client, "cd-l2", user_ns, "cd-l2-channel")
    await wait_for(
        client, ComputeDomainResource, "cd-l2", lambda c: bool(c.get("status")), namespace=user_ns
    )

    # A third instance waits; the leader steps down gracefully: the takeover is immediate.
    third = await start_controller(
        settings=_settings(sim, driver_ns, "c", release=True), wait_leading=False
    )
    await stop(tasks[standby])
    released = await client.get(Lease, LEASE, namespace=driver_ns)
    assert released.spec.holderIdentity in (None, third.identity)
    waited = await _takeover(third)
    print(f"takeover after a graceful step-down: {waited:.1f}s")
    await objects.create_cd(client, "cd-l3", user_ns, "cd-l3-channel")
    await wait_for(
        client, ComputeDomainResource, "cd-l3", lambda c: bool(c.get("status")), namespace=user_ns
    )
