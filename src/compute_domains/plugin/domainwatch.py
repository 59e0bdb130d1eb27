"""The plugin's ComputeDomain and clique reads by watch: the caches, and one object followed.

- ComputeDomain caches are indexed by UID (``UID_INDEX``), as upstream's plugin indexes its
  informer: on a virtual node the host's one cache (``host_cache``, from
  ``infra.kube.informers``, which every in-process plugin and agent of the host reads), in its
  own process the plugin's own (``own_cache``, one watch of every namespace, run by its owner).
  ``cached_name`` reads a CD's name and namespace from either.
- ``cliques`` is the host's cache of the driver namespace's cliques (and shared registries).
- ``states`` yields one object now and after every change (a read, then a watch from that
  read's resourceVersion); ``follow`` waits on it until a predicate holds. With the host's cache
  of the kind both read the cache instead, and open no watch of their own.

``computedomain`` (``Domains``: lookups, the node mark, readiness) reads through these; the
names are re-exported there, where their callers have always found them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

from lightkube import AsyncClient

from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.infra import kube
from compute_domains.infra.kube import cache, informers

UID_INDEX = "uid"
"""The index of a ComputeDomain cache by UID."""


def host_cache(shared: informers.Informers) -> cache.Cache[Any]:
    """The node host's one ComputeDomain cache, indexed by UID (every in-process plugin and
    agent of the host reads this one)."""
    return shared.informer(ComputeDomainResource, indexers={UID_INDEX: _uid_of})


def cached_name(domains: cache.Cache[Any], domain_uid: str) -> tuple[str, str] | None:
    """``(name, namespace)`` of CD ``domain_uid`` from a UID-indexed cache; None while the
    cache has not listed yet or does not hold it (a CD created a moment ago)."""
    if not domains.synced.is_set():
        return None
    for obj in domains.by_index(UID_INDEX, domain_uid):
        meta = obj.get("metadata") or {}
        return str(meta.get("name") or ""), str(meta.get("namespace") or "")
    return None


def own_cache(client: AsyncClient) -> cache.Cache[Any]:
    """A plugin's own watched cache of the ComputeDomains of every namespace, indexed by UID
    (for ``Domains(watched=...)``; its owner runs it)."""
    return cache.Cache(
        client, ComputeDomainResource, name="ComputeDomain", indexers={UID_INDEX: _uid_of}
    )


def _uid_of(obj: Any) -> list[str]:
    # The raw field: a generic resource decodes all of ObjectMeta on every ``.metadata``.
    uid = (obj.get("metadata") or {}).get("uid")
    return [str(uid)] if uid else []


def cliques(shared: informers.Informers, driver_namespace: str) -> cache.Cache[Any]:
    """The host's cache of the cliques (and shared registries) of the driver namespace."""
    return shared.informer(ComputeDomainCliqueResource, namespace=driver_namespace)


async def states(
    client: AsyncClient,
    res: Any,
    name: str,
    namespace: str,
    shared: cache.Cache[Any] | None = None,
) -> AsyncGenerator[Any | None, None]:
    """``name`` now (None while absent) and after every change: a read, then a watch from that
    read; with the host's cache of the kind (``shared``), from it instead."""
    if shared is not None:
        async for cached in informers.follow(shared, (namespace, name)):
            yield cached
        return
    version: str | None = None
    try:
        with kube.translated(f"reading {name}"):
            obj = await client.get(res, name, namespace=namespace)
        version = obj.metadata.resourceVersion if obj.metadata else None
    except kube.NotFound:
        obj = None  # not created yet: the watch below sees it appear
    yield obj
    async for op, obj in client.watch(
        res, namespace=namespace, fields={"metadata.name": name}, resource_version=version
    ):
        yield None if op == "DELETED" else obj


async def follow(
    client: AsyncClient,
    res: Any,
    name: str,
    namespace: str,
    ready: Callable[[Any], bool],
    shared: cache.Cache[Any] | None = None,
) -> None:
    """Read ``name`` once, then follow a watch from that read until ``ready`` holds; with the
    host's cache of the kind (``shared``), wait on it instead."""
    if shared is not None:
        await informers.wait_until(shared, (namespace, name), ready)
        return
    # aclosing: returning ends the watch (its connection) now, not when the generator is
    # collected, which a reference cycle can put off while the API server keeps serving it.
    async with contextlib.aclosing(states(client, res, name, namespace)) as found:
        async for obj in found:
            if obj is not None and ready(obj):
                return
