"""Issue 26's per-clique scope on simulated nodes: per-clique CDs share a node, one channel each.

No controller and no agent run here: the test writes each CD's ``imex-scope`` annotation (as
the controller does), its workload template with ``sharedimex.channel_selector()``, and the
clique's shared registry with the nodes' entries Ready (as the resident agents do once the
shared IMEX runs). The plugin allocates the channels, marks the Node, advertises
``domain=shared-imex`` and injects only each CD's own channel.
"""

from __future__ import annotations

import asyncio

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceSlice

from compute_domains.api import names, sharedimex
from compute_domains.plugin import devices
from compute_domains.sim import state
from tests.integration.helpers import wait_for
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
PER_CLIQUE = sharedimex.Scope.PER_CLIQUE.value
SCRIPT = "ls /dev/nvidia-caps-imex-channels; echo end-of-list; sleep 3600"


async def _per_clique_cd(admin: AsyncClient, ns: Namespaces, name: str) -> str:
    uid = await objects.compute_domain(admin, ns.user, name, scope=PER_CLIQUE)
    await objects.workload_template(
        admin, ns.user, name, uid, selector=sharedimex.channel_selector()
    )
    return uid


def _holders(slice_: ResourceSlice) -> set[str]:
    out = set()
    for d in slice_.to_dict()["spec"]["devices"]:
        holder = d["attributes"].get(names.CHANNEL_HOLDER_ATTRIBUTE)
        if d["name"].startswith("channel-"):
            out.add(holder["string"] if holder else "")
    return out


async def _advertises(admin: AsyncClient, node: str, want: str) -> None:
    await wait_for(admin, ResourceSlice, devices.slice_name(node), lambda s: _holders(s) == {want})


def _marks(node: Node) -> tuple[dict[str, int], str | None, str | None]:
    meta = node.metadata
    assert meta is not None
    labels = meta.labels or {}
    return (
        sharedimex.channels(meta.annotations),
        labels.get(sharedimex.SHARED_IMEX_LABEL),
        labels.get(names.COMPUTE_DOMAIN_LABEL),
    )


async def _unmark(admin: AsyncClient, node: str) -> None:
    """Leave the node as the next test expects it: no shared-IMEX label, no channel marks."""
    n = await admin.get(Node, node)
    keys = sharedimex.channels(n.metadata.annotations if n.metadata else None)
    patch = {
        "metadata": {
            "labels": {sharedimex.SHARED_IMEX_LABEL: None},
            "annotations": {sharedimex.channel_key(uid): None for uid in keys},
        }
    }
    await admin.patch(Node, node, patch)


async def _channels_listed(admin: AsyncClient, ns: str, pod: str) -> set[str]:
    log = await objects.log_containing(admin, ns, pod, "end-of-list")
    return {w for w in log.split() if w.startswith("channel")}


async def test_two_per_clique_cds_share_a_node_each_pod_seeing_only_its_own_channel(
    admin: AsyncClient,
    spaces: Namespaces,
    start_plugin: StartPlugin,
    plugin_sim: state.SimPaths,
) -> None:
    await start_plugin(NODE_A)
    clique = node_info(NODE_A).clique_id
    await objects.shared_registry(admin, spaces.driver, clique, NODES)
    x = await _per_clique_cd(admin, spaces, "x")
    y = await _per_clique_cd(admin, spaces, "y")
    try:
        for name in ("x", "y"):
            await objects.pod(admin, spaces.user, f"w{name}", SCRIPT, template=name, node=NODE_A)
        for name in ("wx", "wy"):
            await objects.running(admin, spaces.user, name)
        # The two prepares run concurrently: which CD gets 1 and which 2 is theirs to race.
        held, label, rest = _marks(await admin.get(Node, NODE_A))
        assert (sorted(held), sorted(held.values()), label, rest) == (
            sorted([x, y]),
            [1, 2],
            "on",
            None,
        )
        assert await _channels_listed(admin, spaces.user, "wx") == {f"channel{held[x]}"}
        assert await _channels_listed(admin, spaces.user, "wy") == {f"channel{held[y]}"}
        await _advertises(admin, NODE_A, sharedimex.SHARED_HOLDER)
        cp = objects.read_checkpoint(plugin_sim, NODE_A)
        assert {e.scope for e in cp.claims.values()} == {sharedimex.Scope.PER_CLIQUE}

        # A per-domain CD's template selects free or its own nodes: never this one.
        other = await objects.compute_domain(admin, spaces.user, "perdomain")
        await objects.workload_template(admin, spaces.user, "perdomain", other)
        await objects.pod(admin, spaces.user, "wd", SCRIPT, template="perdomain", node=NODE_A)
        await wait_for(
            admin,
            Pod,
            "wd",
            lambda p: any(
                c.type == "PodScheduled" and c.reason == "Unschedulable"
                for c in (p.status.conditions or [] if p.status else [])
            ),
            namespace=spaces.user,
        )

        # X's last pod goes: its annotation goes, the label (the shared IMEX) stays.
        await admin.delete(Pod, "wx", namespace=spaces.user, grace_period=0)
        await wait_for(admin, Node, NODE_A, lambda n: _marks(n) == ({y: held[y]}, "on", None))
        await _advertises(admin, NODE_A, sharedimex.SHARED_HOLDER)
    finally:
        for pod in ("wx", "wy", "wd"):
            await asyncio.gather(
                admin.delete(Pod, pod, namespace=spaces.user, grace_period=0),
                return_exceptions=True,
            )
        await wait_for(admin, Node, NODE_A, lambda n: not _marks(n)[0], timeout=60)
        await _unmark(admin, NODE_A)


async def test_a_per_clique_claim_on_a_node_without_clique_id_is_refused_for_good(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    await start_plugin(PLAIN_NODE)
    await _per_clique_cd(admin, spaces, "plain")
    await objects.pod(admin, spaces.user, "w", SCRIPT, template="plain", node=PLAIN_NODE)
    text = "per-clique scope needs multi-node NVLink: node has no clique ID"

    async def refused() -> str:
        while True:
            for e in await objects.events(admin, spaces.user, "w"):
                if text in (e.message or ""):
                    return e.message or ""
            await asyncio.sleep(0.3)

    await asyncio.wait_for(refused(), 60)
    assert _marks(await admin.get(Node, PLAIN_NODE)) == ({}, None, None)


async def test_an_eager_plugin_labels_its_node_and_a_lazy_one_frees_it_at_start(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    try:
        eager = await start_plugin(NODE_B, shared_imex_eager=True)
        await wait_for(admin, Node, NODE_B, lambda n: _marks(n) == ({}, "on", None))
        await _advertises(admin, NODE_B, sharedimex.SHARED_HOLDER)
        await eager.stop()
        await start_plugin(NODE_B)  # not eager, no per-clique claim live: the label goes
        await wait_for(admin, Node, NODE_B, lambda n: _marks(n) == ({}, None, None))
        await _advertises(admin, NODE_B, "")
    finally:
        await _unmark(admin, NODE_B)
