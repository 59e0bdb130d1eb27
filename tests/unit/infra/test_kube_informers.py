"""One cache per kind per process: the registry a node host shares, and its followers."""

from __future__ import annotations

import asyncio
from typing import Any

from lightkube.resources.core_v1 import ConfigMap, Pod

from compute_domains.infra.kube import cache, informers
from tests.unit.infra.kubefakes import ScriptedClient, cm


def test_one_cache_per_kind_and_selection_with_every_asked_index() -> None:
    shared = informers.Informers(None)
    a = shared.informer(ConfigMap, namespace="ns", indexers={"x": cache.namespace_indexer})
    b = shared.informer(ConfigMap, namespace="ns", indexers={"y": cache.namespace_indexer})
    other_ns = shared.informer(ConfigMap, namespace="other")
    pods = informers.bound_pods(shared)
    assert a is b
    assert other_ns is not a
    assert informers.bound_pods(shared) is pods
    assert len(shared.caches()) == 3
    assert a.by_index("x", "ns") == [] and a.by_index("y", "ns") == []
    assert pods.by_index(informers.NODE_INDEX, "n1") == []


async def test_run_starts_each_cache_once_even_when_asked_later() -> None:
    client = ScriptedClient(lists=[([cm("a", "1")], "5"), ([], "7")], watches=[])
    shared = informers.Informers(client)
    first = shared.informer(ConfigMap, namespace="ns")
    task = asyncio.create_task(shared.run())
    try:
        await asyncio.wait_for(first.synced.wait(), 2)
        assert shared.informer(ConfigMap, namespace="ns") is first  # no second list
        late = shared.informer(Pod, namespace="ns")
        await asyncio.wait_for(late.synced.wait(), 2)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert client.list_calls == 2
    assert client.watch_versions == ["5", "7"]


async def test_follow_yields_the_current_state_then_each_change_of_its_object() -> None:
    inf: cache.Cache[Any] = cache.Cache(None, ConfigMap, name="t")
    seen: list[str | None] = []

    async def consume() -> None:
        async for obj in informers.follow(inf, ("ns", "a")):
            seen.append(obj.metadata.resourceVersion if obj is not None else None)
            if len(seen) == 3:
                return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    inf._replace([cm("b", "1")])  # synced, a absent
    inf.synced.set()
    while len(seen) < 1:
        await asyncio.sleep(0)
    inf._apply("ADDED", cm("b", "2"))  # not ours: no wake-up
    inf._apply("ADDED", cm("a", "3"))
    while len(seen) < 2:
        await asyncio.sleep(0)
    inf._apply("DELETED", cm("a", "4"))
    await asyncio.wait_for(task, 2)
    assert seen == [None, "3", None]
    assert not inf._by_key[("ns", "a")]  # the follower unsubscribed when it stopped


async def test_wait_until_returns_once_the_object_is_ready() -> None:
    inf: cache.Cache[Any] = cache.Cache(None, ConfigMap, name="t")
    inf._replace([cm("a", "1")])
    inf.synced.set()
    waiting = asyncio.create_task(
        informers.wait_until(inf, ("ns", "a"), lambda o: o.metadata.resourceVersion == "3")
    )
    await asyncio.sleep(0)
    inf._apply("MODIFIED", cm("a", "2"))
    await asyncio.sleep(0)
    assert not waiting.done()
    inf._apply("MODIFIED", cm("a", "3"))
    got = await asyncio.wait_for(waiting, 2)
    assert got.metadata.resourceVersion == "3"
    assert not inf._by_key[("ns", "a")]
