"""Workload channel claims on simulated nodes: injection, sharing a node, holding a node.

Upstream scenarios A1 (one channel) and A2 (``All``: 2048 channels), plus what we add beyond
upstream: several pods of one CD on one node (the label stays until the last one ends) and a
pod of another CD kept off a node the first CD holds (the slots advertise their holder).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceSlice

from compute_domains.api import names
from compute_domains.api.computedomain import Readiness
from compute_domains.plugin import devices
from compute_domains.plugin.config import RetrySettings
from compute_domains.sim import state, toolchain
from tests.integration import helpers
from tests.integration.helpers import wait_for, wait_gone
from tests.integration.plugin import objects
from tests.integration.plugin.conftest import (
    NODES,
    PLAIN_NODE,
    Namespaces,
    StartPlugin,
    node_info,
)

pytestmark = pytest.mark.integration

NODE_A, NODE_B = NODES
LS = "ls -l /dev/nvidia-caps-imex-channels; sleep 3600"


async def _cd(admin: AsyncClient, ns: Namespaces, name: str, mode: str = "Single") -> str:
    uid = await objects.compute_domain(admin, ns.user, name, mode=mode)
    await objects.ready_clique(admin, ns.driver, uid, node_info(NODE_A).clique_id, NODES)
    await objects.workload_template(admin, ns.user, name, uid, mode=mode)
    return uid


def _advertised_holders(slice_: ResourceSlice) -> set[str]:
    out = set()
    for d in slice_.to_dict()["spec"]["devices"]:
        holder = d["attributes"].get(names.CHANNEL_HOLDER_ATTRIBUTE)
        if d["name"].startswith("channel-"):
            out.add(holder["string"] if holder else "")
    return out


async def _holder(admin: AsyncClient, node: str, want: str, timeout: float = 30) -> None:
    await wait_for(
        admin,
        ResourceSlice,
        devices.slice_name(node),
        lambda s: _advertised_holders(s) == {want},
        timeout=timeout,
    )


async def test_a1_single_channel_is_injected(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    await start_plugin(NODE_A)
    uid = await _cd(admin, spaces, "imex-channel-injection")
    await objects.pod(
        admin,
        spaces.user,
        "imex-channel-injection",
        LS,
        template="imex-channel-injection",
        node=NODE_A,
    )
    await objects.running(admin, spaces.user, "imex-channel-injection")
    log = await objects.log_containing(admin, spaces.user, "imex-channel-injection", "channel0")
    assert "channel1" not in log
    assert "238, 0" in log  # char device with the node's IMEX major, minor 0
    assert await objects.node_label(admin, NODE_A) == uid
    await _holder(admin, NODE_A, uid)
    await admin.delete(Pod, "imex-channel-injection", namespace=spaces.user, grace_period=0)
    await objects.wait_label(admin, NODE_A, None)
    await _holder(admin, NODE_A, "")


async def test_a2_all_mode_injects_every_channel(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    await start_plugin(NODE_A)
    await _cd(admin, spaces, "imex-channel-injection-all", mode="All")
    chans = "/dev/nvidia-caps-imex-channels"
    script = f"ls {chans}; echo count=$(ls {chans} | wc -l); sleep 3600"
    await objects.pod(
        admin, spaces.user, "all", script, template="imex-channel-injection-all", node=NODE_A
    )
    await objects.running(admin, spaces.user, "all")
    log = await objects.log_containing(admin, spaces.user, "all", "count=")
    assert "count=2048" in log
    assert "channel2047" in log and "channel222" in log


async def test_two_pods_of_one_domain_share_a_node_and_the_last_releases_it(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin, plugin_sim: state.SimPaths
) -> None:
    await start_plugin(NODE_A)
    uid = await _cd(admin, spaces, "shared")
    for name in ("w0", "w1"):
        await objects.pod(admin, spaces.user, name, LS, template="shared", node=NODE_A)
    for name in ("w0", "w1"):
        await objects.running(admin, spaces.user, name)
        await objects.log_containing(admin, spaces.user, name, "channel0")
    claims = [await objects.claim_of(admin, spaces.user, n) for n in ("w0", "w1")]
    slots = {c.status.allocation.devices.results[0].device for c in claims}  # type: ignore[union-attr]
    assert len(slots) == 2, f"each pod has its own slot: {slots}"
    assert await objects.node_label(admin, NODE_A) == uid
    await _holder(admin, NODE_A, uid)

    await admin.delete(Pod, "w0", namespace=spaces.user, grace_period=0)
    await wait_gone(admin, Pod, "w0", spaces.user)
    first = claims[0].metadata.uid  # type: ignore[union-attr]
    await _until(lambda: not objects.cdi_spec_path(plugin_sim, NODE_A, first).exists())
    assert await objects.node_label(admin, NODE_A) == uid, "the remaining pod keeps the daemon"

    await admin.delete(Pod, "w1", namespace=spaces.user, grace_period=0)
    await objects.wait_label(admin, NODE_A, None)
    await _holder(admin, NODE_A, "")


async def test_a_node_held_by_one_domain_is_not_given_to_another(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    for node in NODES:
        await start_plugin(node)
    first = await _cd(admin, spaces, "first")
    second = await _cd(admin, spaces, "second")
    await objects.pod(admin, spaces.user, "holder", LS, template="first", node=NODE_A)
    await objects.running(admin, spaces.user, "holder")
    await _holder(admin, NODE_A, first)

    # Free to go anywhere: the scheduler must pick the free node.
    await objects.pod(admin, spaces.user, "anywhere", LS, template="second")
    placed = await objects.running(admin, spaces.user, "anywhere")
    assert placed.spec is not None and placed.spec.nodeName == NODE_B
    assert await objects.node_label(admin, NODE_B) == second

    # Pinned to the held node: unschedulable while the first CD holds it, then placed.
    await objects.pod(admin, spaces.user, "pinned", LS, template="second", node=NODE_A)
    pending = await wait_for(
        admin,
        Pod,
        "pinned",
        lambda p: any(
            c.type == "PodScheduled" and c.status == "False" for c in (p.status.conditions or [])
        ),
        namespace=spaces.user,
        timeout=60,
    )
    assert pending.spec is not None and not pending.spec.nodeName
    await admin.delete(Pod, "holder", namespace=spaces.user, grace_period=0)
    await objects.wait_label(admin, NODE_A, second, timeout=120)
    moved = await objects.running(admin, spaces.user, "pinned")
    assert moved.spec is not None and moved.spec.nodeName == NODE_A


async def test_daemon_claim_gets_identity_env_folder_and_capability(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin, plugin_sim: state.SimPaths
) -> None:
    await start_plugin(NODE_A)
    uid = await objects.compute_domain(admin, spaces.user, "daemonized")
    await objects.daemon_template(admin, spaces.driver, "daemon-tpl", uid)
    script = (
        "echo uid=$COMPUTE_DOMAIN_UUID name=$COMPUTE_DOMAIN_NAME ns=$COMPUTE_DOMAIN_NAMESPACE "
        "clique=$CLIQUE_ID; touch /imexd/written-by-daemon; ls -l /dev/nvidia-caps; echo done; "
        "sleep 3600"
    )
    await objects.pod(admin, spaces.driver, "daemon", script, template="daemon-tpl", node=NODE_A)
    await objects.running(admin, spaces.driver, "daemon")
    log = await objects.log_containing(admin, spaces.driver, "daemon", "done")
    clique = node_info(NODE_A).clique_id
    assert f"uid={uid} name=daemonized ns={spaces.user} clique={clique}" in log
    assert "nvidia-cap7" in log
    folder = plugin_sim.node_root(NODE_A) / "var/lib/kubelet/plugins"
    assert (folder / "compute-domain.nvidia.com/domains" / uid / "written-by-daemon").exists()
    assert await objects.node_label(admin, NODE_A) is None, "daemon claims never label"


async def test_prepare_waits_for_the_daemon_and_returns_as_soon_as_it_is_ready(
    admin: AsyncClient,
    spaces: Namespaces,
    start_plugin: StartPlugin,
    plugin_sim: state.SimPaths,
    toolset: toolchain.Toolset,
) -> None:
    """The wait follows the clique by watch: one read, one watch, the reaction in well under
    the 3 s a capped retry (upstream's 250 ms doubling to 3 s) or a poll would need."""
    await start_plugin(NODE_A)
    clique = node_info(NODE_A).clique_id
    uid = await objects.compute_domain(admin, spaces.user, "waiting")
    await objects.ready_clique(
        admin, spaces.driver, uid, clique, [NODE_A], status=Readiness.NOT_READY
    )
    before = await helpers.api_requests(toolset, plugin_sim, "computedomaincliques")
    await objects.workload_template(admin, spaces.user, "waiting", uid)
    await objects.pod(admin, spaces.user, "w", LS, template="waiting", node=NODE_A)
    await objects.wait_label(admin, NODE_A, uid)  # the label pulls the daemon onto the node
    await _until(lambda: _claim_states(plugin_sim, spaces.user) == {"PrepareStarted"})
    # A deliberate hold, part of what is tested (not a settle time): long enough that a
    # retrying prepare would be at its 3 s cap (after 0.25+0.5+1+2 s).
    await asyncio.sleep(4.0)
    pod = await admin.get(Pod, "w", namespace=spaces.user)
    assert pod.status is not None and pod.status.phase == "Pending"
    loop = asyncio.get_running_loop()
    await objects.set_ready(admin, spaces.driver, uid, clique, NODE_A)
    ready_at = loop.time()
    await _until(lambda: _claim_states(plugin_sim, spaces.user) == {"PrepareCompleted"}, timeout=10)
    reaction = loop.time() - ready_at
    assert reaction < 1.0, f"prepare completed {reaction:.2f}s after the clique turned Ready"
    # A watch is counted when it ends (the plugin closes it once the entry is Ready).
    after = before

    async def watch_counted() -> bool:
        nonlocal after
        after = await helpers.api_requests(toolset, plugin_sim, "computedomaincliques")
        return after["WATCH"] > before["WATCH"]

    try:
        await asyncio.wait_for(_until_async(watch_counted), 30)
    except TimeoutError:
        raise AssertionError(f"no watch of the clique ended: {before} -> {after}") from None
    # The plugin read the clique once and watched it; the other GET is set_ready's own.
    assert after["GET"] - before["GET"] == 2, (before, after)
    assert after["WATCH"] - before["WATCH"] == 1, (before, after)
    await objects.running(admin, spaces.user, "w", timeout=60)


async def _until_async(check: Callable[[], Awaitable[bool]]) -> None:
    while not await check():
        await asyncio.sleep(0.2)


def _claim_states(sim: state.SimPaths, namespace: str) -> set[str]:
    """States of ``namespace``'s claims in NODE_A's plugin checkpoint (the node's checkpoint
    also keeps earlier tests' claims; none before it is written)."""
    try:
        found = objects.read_checkpoint(sim, NODE_A)
    except (AssertionError, OSError, ValueError):
        return set()
    return {e.state.value for e in found.claims.values() if e.namespace == namespace}


async def test_a_node_labelled_for_another_domain_refuses_with_a_clear_error(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    await start_plugin(NODE_A, retry=RetrySettings(budget_s=3.0, readiness_timeout_s=2.0))
    await _cd(admin, spaces, "late")
    await admin.patch(
        Node, NODE_A, {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: "someone-else"}}}
    )
    try:
        await objects.pod(admin, spaces.user, "w", LS, template="late", node=NODE_A)

        refused = objects.event_containing(admin, spaces.user, "w", "held by another ComputeDomain")
        message = await asyncio.wait_for(refused, 60)
        assert "someone-else" in message
        assert await objects.node_label(admin, NODE_A) == "someone-else"
    finally:
        await admin.patch(
            Node, NODE_A, {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}}
        )


async def test_a_node_that_cannot_join_a_full_clique_says_so_in_the_pod_event(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    """The 19th node of an 18-slot clique: the controller's CliqueFull condition names it, and
    the pod's event carries that (the clique and its limit), not "IMEX daemon not Ready yet"."""
    await start_plugin(NODE_B, retry=RetrySettings(budget_s=3.0, readiness_timeout_s=2.0))
    clique = node_info(NODE_B).clique_id
    uid = await objects.compute_domain(admin, spaces.user, "full")
    await objects.ready_clique(admin, spaces.driver, uid, clique, [NODE_A])
    await objects.workload_template(admin, spaces.user, "full", uid)
    why = (
        f"node {NODE_B} cannot join clique {clique}: it is full (18 of 18 slots, "
        "maxNodesPerIMEXDomain)"
    )
    await objects.cd_condition(admin, spaces.user, "full", "Ready", "False", "CliqueFull", why)
    await objects.pod(admin, spaces.user, "w", LS, template="full", node=NODE_B)

    async def reported() -> str:
        while True:
            for e in await objects.events(admin, spaces.user, "w"):
                if e.reason == "FailedPrepareDynamicResources" and "full" in (e.message or ""):
                    return e.message or ""
            await asyncio.sleep(0.3)

    message = await asyncio.wait_for(reported(), 60)
    assert why in message and "not Ready yet" not in message, message


async def test_a_node_without_clique_waits_on_the_domain_status_and_gets_no_device_nodes(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    await start_plugin(PLAIN_NODE)
    uid = await objects.compute_domain(admin, spaces.user, "plain")
    await objects.workload_template(admin, spaces.user, "plain", uid)
    script = "ls /dev/nvidia-caps-imex-channels || echo no-channels; sleep 3600"
    await objects.pod(admin, spaces.user, "w", script, template="plain", node=PLAIN_NODE)
    await objects.wait_label(admin, PLAIN_NODE, uid)
    await objects.cd_status_ready(admin, spaces.user, "plain", PLAIN_NODE)
    await objects.running(admin, spaces.user, "w", timeout=60)
    await objects.log_containing(admin, spaces.user, "w", "no-channels")


async def _until(check: Callable[[], bool], timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.2)
