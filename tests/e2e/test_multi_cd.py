"""Upstream B3 (multi-CD demo flows) and the §1.L gaps upstream never tested, on 2 racks x 2 nodes.

* B3 "no ComputeDomain": a GPU job without a CD adds no pod to the driver namespace and labels
  no node.
* B3 "two jobs with distinct CDs at the same time" + §1.L.3 clique boundaries: two CDs created
  at once, each with one pod per rack, so each spans both cliques; each gets one
  ComputeDomainClique per clique, indices restart per clique, daemons only on its own nodes.
* §1.L.5 deletion ordering (#380, #725, PR #384, PR #518), with our "wait" decision (issue 18,
  docs/status.md): deleting one CD while its workload still runs keeps it (finalizer), its
  daemons and its node labels while the pods hold its claims, says so (``Deleting``
  condition naming the pods), and leaves the other CD untouched (its labels, daemons and
  status); the workload pods still delete within upstream's 10 s, and then the CD, its
  daemons, cliques, node labels, claims and CDI specs go (no stuck finalizer).
* §1.L.6 late prepare after unprepare (#1162 -> PR #1188): a pod deleted while its claim's
  prepare is still waiting for the daemon leaves nothing behind, also after the kubelet's 45 s
  prepare window has passed: no node label, daemon, CDI spec, or claim still prepared in the
  node's checkpoint.

Not repeated here: one-CD-per-node refusal and two pods of one CD sharing a node are driven
through the real scheduler in ``tests/integration/plugin/test_channels.py``; node loss is in
``test_two_racks.py``.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate

from compute_domains.api import clique, computedomain, names, nodemark, sharedimex
from compute_domains.plugin import checkpoint
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.integration.plugin.objects import read_checkpoint

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=2, nodes_per_rack=2)
NODES = ("gb200-r0-n00", "gb200-r0-n01", "gb200-r1-n00", "gb200-r1-n01")
# Each CD takes one node of each rack, so each spans both cliques.
PLACEMENT = {"cd-a": ("gb200-r0-n00", "gb200-r1-n00"), "cd-b": ("gb200-r0-n01", "gb200-r1-n01")}


async def _labels(admin: AsyncClient) -> dict[str, str | None]:
    """GPU node → the CD UID its label names (None: free). In the per-clique scope a node
    serving a CD carries its channel annotation instead (decision 0015); here one CD at most."""
    out: dict[str, str | None] = {}
    async for n in admin.list(Node, labels={names.GPU_PRESENT_LABEL: "true"}):
        meta = n.metadata
        assert meta is not None
        held = sorted(sharedimex.channels(meta.annotations)) if helpers.per_clique() else []
        assert len(held) <= 1, (meta.name, held)
        out[str(meta.name)] = held[0] if held else (nodemark.domain_of(meta) or None)
    return out


async def _registry_indices(admin: AsyncClient) -> dict[str, int]:
    """Per clique scope: node → its index in its clique's shared registry."""
    return {
        str(d["nodeName"]): int(d["index"])
        async for c in admin.list(clique.ComputeDomainCliqueResource, namespace=DRIVER_NS)
        if sharedimex.is_registry_name(str(c.metadata.name))  # type: ignore[union-attr]
        for d in c.to_dict().get("daemons") or []  # type: ignore[no-untyped-call]
    }


async def _cd_cliques(admin: AsyncClient, uid: str) -> list[Any]:
    """The CD's own clique objects; in the per-clique scope the shared registries holding its
    channel (one per clique it spans)."""
    if helpers.per_clique():
        return [
            c
            async for c in admin.list(clique.ComputeDomainCliqueResource, namespace=DRIVER_NS)
            if sharedimex.is_registry_name(str(c.metadata.name))  # type: ignore[union-attr]
            and uid in sharedimex.channels(c.metadata.annotations)  # type: ignore[union-attr]
        ]
    return [
        c
        async for c in admin.list(
            clique.ComputeDomainCliqueResource,
            namespace=DRIVER_NS,
            labels={names.COMPUTE_DOMAIN_LABEL: uid},
        )
    ]


def _claim_specs(sim: state.SimPaths, node: str) -> list[str]:
    return [f.name for f in (sim.node_root(node) / "var/run/cdi").glob("*claim*")]


def _held_claims(sim: state.SimPaths, node: str) -> list[str]:
    """Checkpoint entries of ``node`` that still hold (or may hold) devices."""
    done = (checkpoint.ClaimState.UNPREPARED,)
    return [
        f"{e.namespace}/{e.name} {e.state}"
        for e in read_checkpoint(sim, node).claims.values()
        if e.state not in done
    ]


async def test_b3_a_job_without_a_cd_adds_no_driver_pods(admin: AsyncClient) -> None:
    """B3 "nvbandwidth-test-no-compute-domain-job": no extra pods in the driver namespace."""
    before = {str(p.metadata.name) async for p in admin.list(Pod, namespace=DRIVER_NS)}  # type: ignore[union-attr]
    pod = helpers.channel_pod("no-cd", "unused", command="sleep 3600", gpus=4).to_dict()
    pod["spec"]["resourceClaims"] = []
    pod["spec"]["containers"][0]["resources"].pop("claims")
    await admin.create(cast(Pod, Pod.from_dict(pod)))
    await helpers.within(100, lambda: helpers.pod_ready(admin, "no-cd"), "pod Ready")
    # An absence, watched for 5 s: a wrongly triggered daemon would show up within them.
    end = time.monotonic() + 5
    while time.monotonic() < end:
        after = {str(p.metadata.name) async for p in admin.list(Pod, namespace=DRIVER_NS)}  # type: ignore[union-attr]
        assert after == before
        await asyncio.sleep(0.5)
    assert set((await _labels(admin)).values()) == {None}
    await admin.delete(Pod, "no-cd", namespace="default")
    await helpers.within(10, lambda: helpers.gone(admin, Pod, "no-cd"), "pod gone")


async def test_b3_two_cds_across_cliques_then_one_deleted_while_running(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    """B3 "two 2-node jobs with distinct CDs at once"; §1.L.3 cliques; §1.L.5 deletion order."""
    uids = {cd: await helpers.create_cd(admin, cd, num_nodes=2) for cd in PLACEMENT}
    for cd, nodes in PLACEMENT.items():
        for i, node in enumerate(nodes):
            await admin.create(helpers.channel_pod(f"{cd}-{i}", f"{cd}-rct", node=node, gpus=4))

    async def both_ready() -> bool:
        for cd in PLACEMENT:
            st = await helpers.cd_status(admin, cd)
            nodes = st.get("nodes") or []
            if st.get("status") != "Ready" or len(nodes) != 2:
                return False
        return True

    await helpers.within(300, both_ready, "both CDs Ready with 2 nodes each")
    for cd, nodes in PLACEMENT.items():
        entries = (await helpers.cd_status(admin, cd))["nodes"]
        assert sorted(e["name"] for e in entries) == sorted(nodes), entries
        assert len({e["cliqueID"] for e in entries}) == 2, f"{cd} spans both racks: {entries}"
        if helpers.per_clique():
            # The indices are the nodes' in their clique's shared registry (kept for good).
            registry = await _registry_indices(admin)
            assert {e["name"]: e["index"] for e in entries} == {n: registry[n] for n in nodes}
        else:
            assert [e["index"] for e in entries] == [0, 0], f"indices restart per clique: {entries}"
        cliques = await _cd_cliques(admin, uids[cd])
        assert len(cliques) == 2, f"{cd}: one ComputeDomainClique per clique"
        daemons = await helpers.daemon_pods(admin, uids[cd])
        served = [] if helpers.per_clique() else sorted(nodes)  # per clique: no CD pod label
        assert sorted(str(d.spec.nodeName) for d in daemons) == served  # type: ignore[union-attr]
        for i, node in enumerate(nodes):
            channel = await helpers.expected_channel(admin, uids[cd], node)
            log = await helpers.log_with(admin, f"{cd}-{i}", (f"channel{channel}",))
            assert re.findall(r"\bchannel(\d+)$", log, re.MULTILINE) == [str(channel)], log
    assert await _labels(admin) == {n: uids[cd] for cd, ns in PLACEMENT.items() for n in ns}
    b_daemons = {str(d.metadata.uid) for d in await helpers.daemon_pods(admin, uids["cd-b"])}  # type: ignore[union-attr]

    # Delete cd-a while its workload still runs: it waits for its pods, and says so; its
    # daemons and labels stay (the job keeps its IMEX domain), cd-b is untouched.
    a_daemons = {str(d.metadata.uid) for d in await helpers.daemon_pods(admin, uids["cd-a"])}  # type: ignore[union-attr]
    await admin.delete(computedomain.ComputeDomainResource, "cd-a", namespace="default")
    waiting: dict[str, Any] = {}

    async def a_waits() -> bool:
        nonlocal waiting
        waiting = await helpers.cd_status(admin, "cd-a")
        conds = [c for c in waiting.get("conditions") or [] if c["type"] == "Deleting"]
        return bool(conds) and all(f"default/cd-a-{i}" in conds[0]["message"] for i in range(2))

    await helpers.within(30, a_waits, "cd-a waits for its two pods")
    assert waiting["status"] == "Ready", waiting
    assert {str(d.metadata.uid) for d in await helpers.daemon_pods(admin, uids["cd-a"])} == (  # type: ignore[union-attr]
        a_daemons
    ), "cd-a's daemons were stopped under its workload"
    assert await _labels(admin) == {n: uids[cd] for cd, ns in PLACEMENT.items() for n in ns}
    st = await helpers.cd_status(admin, "cd-b")
    assert st["status"] == "Ready" and len(st["nodes"]) == 2, st
    assert {str(d.metadata.uid) for d in await helpers.daemon_pods(admin, uids["cd-b"])} == (  # type: ignore[union-attr]
        b_daemons
    ), "cd-b's daemons were restarted"

    # The workload still deletes promptly; then cd-a goes, and its claims with it.
    a_claims = [
        c.name
        for i in range(2)
        for c in (
            await admin.get(Pod, f"cd-a-{i}", namespace="default")
        ).status.resourceClaimStatuses  # type: ignore[union-attr]
        or []
    ]
    assert len(a_claims) == 2
    for i in range(2):
        await admin.delete(Pod, f"cd-a-{i}", namespace="default")

    async def a_pods_gone() -> bool:
        return all([await helpers.gone(admin, Pod, f"cd-a-{i}") for i in range(2)])

    await helpers.within(10, a_pods_gone, "cd-a's workload pods gone")
    await helpers.within(
        60,
        lambda: helpers.gone(admin, computedomain.ComputeDomainResource, "cd-a"),
        "cd-a deleted once its workload is gone (no stuck finalizer)",
    )

    async def a_torn_down() -> bool:
        left: list[Any] = list(await helpers.daemon_pods(admin, uids["cd-a"]))
        left += await _cd_cliques(admin, uids["cd-a"])
        labels = await _labels(admin)
        return not left and all(labels[n] is None for n in PLACEMENT["cd-a"])

    await helpers.within(60, a_torn_down, "cd-a's daemons, cliques and node labels gone")
    assert {n: v for n, v in (await _labels(admin)).items() if v} == {
        n: uids["cd-b"] for n in PLACEMENT["cd-b"]
    }

    async def a_claims_gone() -> bool:
        for name in a_claims:
            if not await helpers.gone(admin, ResourceClaim, str(name)):
                return False
        return not any(_claim_specs(rack_sim, n) for n in PLACEMENT["cd-a"])

    await helpers.within(60, a_claims_gone, "cd-a's claims and CDI specs gone")
    for node in PLACEMENT["cd-a"]:
        assert _held_claims(rack_sim, node) == []

    # Then cd-b the usual way: workload, then CD; nothing of either is left.
    for i in range(2):
        await admin.delete(Pod, f"cd-b-{i}", namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, "cd-b", namespace="default")

    async def nothing_left() -> bool:
        left: list[Any] = list(await helpers.daemon_pods(admin, None))
        left += [
            c
            async for c in admin.list(clique.ComputeDomainCliqueResource, namespace="*")
            # A clique's shared registry stays (its IMEX runs for good), without any channel.
            if not (helpers.per_clique() and sharedimex.is_registry_name(str(c.metadata.name)))  # type: ignore[union-attr]
            or sharedimex.channels(c.metadata.annotations)  # type: ignore[union-attr]
        ]
        left += [
            d
            async for d in admin.list(
                DaemonSet, namespace=DRIVER_NS, labels={names.COMPUTE_DOMAIN_LABEL: None}
            )
        ]
        left += [c async for c in admin.list(ResourceClaim, namespace="*")]
        left += [
            t
            async for t in admin.list(
                ResourceClaimTemplate, namespace="*", labels={names.COMPUTE_DOMAIN_LABEL: None}
            )
        ]
        files = [f for n in NODES for f in _claim_specs(rack_sim, n)]
        return not left and not files and set((await _labels(admin)).values()) == {None}

    await helpers.within(120, nothing_left, "no daemon, clique, claim, template, label or file")


async def test_late_prepare_after_unprepare_leaves_nothing(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    """§1.L.6 (#1162): a pod deleted while its prepare waits for the daemon leaves nothing."""
    if helpers.per_clique():
        pytest.skip(
            "per-clique scope: a prepare waits for no daemon to start (the clique's shared "
            "IMEX runs before any claim, decision 0015), so the window between the delete and "
            "a late prepare that #1162 needs does not exist"
        )
    node = NODES[0]
    uid = await helpers.create_cd(admin, "late")
    await admin.create(helpers.channel_pod("late", "late-rct", node=node))

    async def scheduled() -> bool:
        p = await admin.get(Pod, "late", namespace="default")
        return bool(p.spec and p.spec.nodeName and p.status and p.status.resourceClaimStatuses)

    await helpers.within(60, scheduled, "pod scheduled with its claim")
    claim = (await admin.get(Pod, "late", namespace="default")).status.resourceClaimStatuses[0]  # type: ignore[union-attr,index]

    async def preparing() -> bool:
        return (await _labels(admin))[node] == uid

    # Prepare has begun (it labels the node first) and waits for the daemon to turn Ready.
    await helpers.within(30, preparing, "the plugin labelled the node for the CD")
    rc = await admin.get(ResourceClaim, str(claim.resourceClaimName), namespace="default")
    entry = read_checkpoint(rack_sim, node).get(str(rc.metadata.uid))  # type: ignore[union-attr]
    p = await admin.get(Pod, "late", namespace="default")
    assert not helpers.ready(p) and (
        entry is None or entry.state is not checkpoint.ClaimState.PREPARE_COMPLETED
    ), f"prepare finished before the delete ({entry}); the race was not hit"
    deleted = time.monotonic()
    await admin.delete(Pod, "late", namespace="default", grace_period=0)
    await helpers.within(10, lambda: helpers.gone(admin, Pod, "late"), "pod gone")

    async def clean() -> bool:
        return (
            (await _labels(admin))[node] is None
            and not await helpers.daemon_pods(admin, uid)
            and not _claim_specs(rack_sim, node)
            and await helpers.gone(admin, ResourceClaim, str(claim.resourceClaimName))
            and not _held_claims(rack_sim, node)
        )

    await helpers.within(120, clean, "no label, daemon, CDI spec or prepared claim left")
    # A late prepare retry would land within the kubelet's 45 s window: still clean after it.
    await asyncio.sleep(max(0.0, 50 - (time.monotonic() - deleted)))
    assert await clean(), (await _labels(admin), _held_claims(rack_sim, node))
    await admin.delete(computedomain.ComputeDomainResource, "late", namespace="default")
