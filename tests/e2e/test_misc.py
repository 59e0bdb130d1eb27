"""Upstream G1 "reject unknown field in opaque cfg" and G2 "self-initiated unprepare of stale RCs"
(``test_cd_misc.bats``), through the chart-installed plugin on one simulated node.

G1: a ResourceClaim of the channel class whose opaque ``ComputeDomainChannelConfig`` carries
``unexpectedField``; within upstream's 10 s the pod waits in ContainerCreating with a
``FailedPrepareDynamicResources`` event naming the field (``kubectl describe``), and the
plugin's ``kubectl logs`` call it a permanent error (no 45 s retry loop).

G2: the claim stays in the node's checkpoint. A chart upgrade restarts the plugin, whose startup
cleanup keeps the entry (the claim still exists); after ``helm uninstall``, deleting the pod and
the claim, and a reinstall, the new plugin unprepares the stale claim by itself, and the
kubelet's own later unprepare is an idempotent no-op. The cleanup logic is unit- and
integration-tested (``tests/integration/plugin/test_faults.py``); this is the user's path:
Helm, ``kubectl logs``, a checkpoint that survives an uninstall.
"""

from __future__ import annotations

from typing import cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.integration.plugin import objects

pytestmark = pytest.mark.timeout(900)
SHAPE = topology.Shape(racks=1, nodes_per_rack=1)
RC = "batssuite-rc-bad-opaque-config"
POD = "batssuite-pod-boc"


async def _plugin_log(admin: AsyncClient) -> str:
    return "".join((await helpers.component_logs(admin, "kubelet-plugin")).values())


async def _plugin_log_has(admin: AsyncClient, text: str, seconds: float, what: str) -> str:
    log = ""

    async def has() -> bool:
        nonlocal log
        log = await _plugin_log(admin)
        return text in log

    try:
        await helpers.within(seconds, has, what)
    except AssertionError as err:
        raise AssertionError(f"{err}; plugin log:\n{log[-4000:]}") from None
    return log


async def test_g1_unknown_field_in_opaque_config_is_a_permanent_error(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    """G1 "CDs: reject unknown field in opaque cfg in CD chan ResourceClaim"."""
    await objects.bad_opaque_claim(admin, "default", RC)
    pod = helpers.channel_pod(POD, "unused", command="sleep 3600").to_dict()
    pod["spec"]["resourceClaims"] = [{"name": "cd", "resourceClaimName": RC}]
    await admin.create(cast(Pod, Pod.from_dict(pod)))

    async def scheduled() -> bool:
        p = await admin.get(Pod, POD, namespace="default")
        return bool(p.spec and p.spec.nodeName)

    await helpers.within(60, scheduled, "pod scheduled")

    async def container_creating() -> bool:
        p = await admin.get(Pod, POD, namespace="default")
        statuses = (p.status and p.status.containerStatuses) or []
        return bool(
            statuses
            and statuses[0].state
            and statuses[0].state.waiting
            and statuses[0].state.waiting.reason == "ContainerCreating"
        )

    await helpers.within(10, container_creating, "container waiting in ContainerCreating")

    async def failed_event() -> bool:
        out = helpers.kubectl(rack_sim, "describe", "pod", POD)
        return "FailedPrepareDynamicResources" in out and 'unknown field "unexpectedField"' in out

    await helpers.within(10, failed_event, "FailedPrepareDynamicResources naming the field")
    log = await _plugin_log_has(admin, "Permanent error", 10, "a permanent error in the log")
    assert any("Permanent error" in ln and "unexpectedField" in ln for ln in log.splitlines())


async def test_g2_stale_partially_prepared_claim_is_unprepared_by_the_plugin(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    """G2 "CDs: self-initiated unprepare of stale RCs in PrepareStarted"."""
    # Stage 2: a chart change restarts the plugin; the claim still exists, so it is kept.
    helpers.upgrade(rack_sim, "logVerbosity=debug")
    await _plugin_log_has(
        admin, f"partially prepared claim not stale: default/{RC}", 30, "the entry kept"
    )

    # Stage 3: with the driver uninstalled, the pod and the claim go; the reinstalled plugin
    # finds the stale entry in the checkpoint that survived and unprepares it by itself.
    helpers.uninstall(rack_sim)
    await admin.delete(Pod, POD, namespace="default", grace_period=0)
    await admin.delete(ResourceClaim, RC, namespace="default")
    await helpers.within(60, lambda: helpers.gone(admin, ResourceClaim, RC), "claim deleted")
    helpers.upgrade(rack_sim, "logVerbosity=debug")
    await _plugin_log_has(
        admin, f"unprepared stale claim: default/{RC}", 30, "the stale claim unprepared"
    )

    # Stage 4: the kubelet's own unprepare of that claim is an idempotent no-op.
    await _plugin_log_has(
        admin,
        "Unprepare noop: claim not found in checkpoint data",
        60,
        "the kubelet's unprepare a no-op",
    )
