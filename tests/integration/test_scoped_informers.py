"""A node host's caches hold its own nodes' objects only (``Informers(nodes=...)``).

Against the real API server: a host that names its nodes keeps, in its shared caches of Nodes
and of bound pods, only the objects of those nodes, and still follows every change of them
through the one watch of the whole cluster's (``raw.watch_kept``: the others are read for two
fields and dropped); a host that names none keeps every object, as before.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.infra.kube import informers

NAMESPACE = "default"


@pytest.fixture
async def nodes(client: AsyncClient) -> AsyncIterator[list[str]]:
    """Two Node objects (no kubelet behind them), removed afterwards."""
    suffix = uuid.uuid4().hex[:6]
    made = [f"scope-node-a-{suffix}", f"scope-node-b-{suffix}"]
    for name in made:
        await client.create(Node(metadata=ObjectMeta(name=name)))
    yield made
    for name in made:
        await client.delete(Node, name)


@pytest.fixture
async def pods(client: AsyncClient) -> AsyncIterator[dict[str, str]]:
    """Two pods bound to two made-up node names (no kubelet runs them), removed afterwards."""
    suffix = uuid.uuid4().hex[:6]
    made = {f"scope-a-{suffix}": f"ghost-a-{suffix}", f"scope-b-{suffix}": f"ghost-b-{suffix}"}
    for name, node in made.items():
        spec = PodSpec(nodeName=node, containers=[Container(name="c", image="pause")])
        await client.create(Pod(metadata=ObjectMeta(name=name, namespace=NAMESPACE), spec=spec))
    yield made
    for name in made:
        await client.delete(Pod, name, namespace=NAMESPACE, grace_period=0)


async def _running(shared: informers.Informers) -> asyncio.Task[None]:
    return asyncio.create_task(shared.run())


async def test_a_host_keeps_only_its_own_nodes_and_their_pods(
    client: AsyncClient, nodes: list[str], pods: dict[str, str]
) -> None:
    all_nodes = nodes
    mine = all_nodes[0]
    (pod_a, ghost_a), (pod_b, ghost_b) = sorted(pods.items())
    shared = informers.Informers(client, nodes=frozenset({mine, ghost_a}))
    everyone = informers.Informers(client)
    node_cache, pod_cache = informers.nodes(shared), informers.bound_pods(shared)
    all_node_cache, all_pod_cache = informers.nodes(everyone), informers.bound_pods(everyone)
    tasks = [await _running(shared), await _running(everyone)]
    try:
        for c in (node_cache, pod_cache, all_node_cache, all_pod_cache):
            await asyncio.wait_for(c.synced.wait(), 30)
        assert [n.metadata.name for n in node_cache.objects()] == [mine]
        assert set(all_nodes) <= {n.metadata.name for n in all_node_cache.objects()}
        assert [p.metadata.name for p in pod_cache.objects()] == [pod_a]
        assert {pod_a, pod_b} <= {p.metadata.name for p in all_pod_cache.objects()}

        # Changes after the list come through the watch: ours are kept, the others dropped.
        label = f"scope-{uuid.uuid4().hex[:6]}"
        for node in all_nodes:
            patch: dict[str, Any] = {"metadata": {"labels": {"scope-test": label}}}
            await client.patch(Node, node, patch)
        for name in (pod_b, pod_a):
            patch = {"metadata": {"labels": {"scope-test": label}}}
            await client.patch(Pod, name, patch, namespace=NAMESPACE)

        def labelled(obj: Any) -> bool:
            return (obj.metadata.labels or {}).get("scope-test") == label

        await asyncio.wait_for(informers.wait_until(node_cache, ("", mine), labelled), 30)
        await asyncio.wait_for(informers.wait_until(pod_cache, (NAMESPACE, pod_a), labelled), 30)
        for node in all_nodes:
            await asyncio.wait_for(informers.wait_until(all_node_cache, ("", node), labelled), 30)
        await asyncio.wait_for(
            informers.wait_until(all_pod_cache, (NAMESPACE, pod_b), labelled), 30
        )
        # pod_b was patched before pod_a, and every Node before both: all seen by now.
        assert [n.metadata.name for n in node_cache.objects()] == [mine]
        assert [p.metadata.name for p in pod_cache.objects()] == [pod_a]
        assert pod_cache.by_index(informers.NODE_INDEX, ghost_b) == []
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
