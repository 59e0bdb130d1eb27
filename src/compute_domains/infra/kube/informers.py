"""One cache per kind per process: the informers a host shares with the components it builds.

controller-runtime's model (one informer per kind in a process, many handlers, indexes added by
whoever needs them) for a process that hosts many component instances side by side: the
simulator's node host runs a kubelet, a kubelet plugin and daemons or an agent for each of its
nodes. The host builds one :class:`Informers` and passes it to each component it builds (their
constructors take it; None means "open your own watches", which is what a component in its own
process does). :meth:`Informers.informer` returns the cache of a kind and selection, creating it
on the first ask and starting its single list+watch in :meth:`Informers.run`'s task group; every
later ask gets the same cache, with the indexes it names added.

Reading helpers for consumers that used to follow one object or one node by their own watch:
- :func:`follow` yields one object now (None while absent) and after every change, from the
  shared store: what ``infra.kube.watch.stream`` with a ``metadata.name`` selector gave.
- :func:`wait_until` returns once one object satisfies a predicate.

Invariants:
- Consumers read only after the cache's first list (``synced``); a change between that list
  and the subscription cannot be lost: the subscription is made first.
- Changes are coalesced per follower: a slow follower sees the newest state, never a backlog
  (every follower here only cares about the current state).
- Nothing here is module-level state: the registry lives in the object its host owns.
- A host that names its nodes (``nodes``) keeps only its own nodes' objects in the caches asked
  for ``per_node`` (Nodes by name; bound pods and ResourceSlices by ``spec.nodeName``): a real
  kubelet and plugin watch their own node's objects only, and decoding every other node's
  objects made each host's work grow with the whole cluster. Every consumer here reads its own
  node's objects, by key or by the node index.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal

from lightkube import operators
from lightkube.core.selector import build_selector
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.infra.kube import cache, raw

logger = logging.getLogger(__name__)

NODE_INDEX = "node"
"""The index of bound pods by ``spec.nodeName`` (:func:`bound_pods`)."""

_SelectionKey = tuple[type[Any], str | None, str]
PerNode = Literal["name", "node"]
"""How a host's cache keeps its own nodes' objects (``Informers.informer``)."""


class Informers:
    """The shared caches of one process (see the module docstring); ``run()`` runs them."""

    def __init__(
        self,
        client: Any,
        *,
        name: str = "host",
        watch_timeout_s: int = 300,
        nodes: frozenset[str] | None = None,
    ) -> None:
        self.name = name
        self._client = client
        self._nodes = nodes
        self._watch_timeout_s = watch_timeout_s
        self._caches: dict[_SelectionKey, cache.Cache[Any]] = {}
        self._new: asyncio.Queue[cache.Cache[Any]] = asyncio.Queue()

    def informer(
        self,
        resource: type[Any],
        *,
        namespace: str | None = cache.ALL_NAMESPACES,
        fields: Mapping[str, Any] | None = None,
        indexers: Mapping[str, cache.Indexer] | None = None,
        per_node: PerNode | None = None,
    ) -> cache.Cache[Any]:
        """The shared cache of ``resource`` in ``namespace`` with field selector ``fields``;
        created and started on the first ask, with ``indexers`` added on every ask. With
        ``per_node`` and a host that named its nodes, only those nodes' objects: ``"name"``
        those named after one of them (Nodes), ``"node"`` those whose ``spec.nodeName`` is one."""
        selector = build_selector(dict(fields)) if fields else ""
        scoped = per_node if self._nodes is not None else None
        key: _SelectionKey = (resource, namespace, f"{selector}|{scoped or ''}")
        found = self._caches.get(key)
        if found is None:
            kind = getattr(resource, "__name__", str(resource))
            found = cache.Cache(
                self._client,
                resource,
                name=f"{self.name} {kind}",
                namespace=namespace,
                fields=fields,
                watch_timeout_s=self._watch_timeout_s,
                keep=None if scoped is None else self._keep(scoped),
            )
            self._caches[key] = found
            self._new.put_nowait(found)
        for index, indexer in (indexers or {}).items():
            found.add_indexer(index, indexer)
        return found

    def _keep(self, per_node: PerNode) -> raw.Keep:
        mine = self._nodes or frozenset()
        if per_node == "name":
            return lambda name, _node: name in mine
        return lambda _name, node: node in mine

    def caches(self) -> list[cache.Cache[Any]]:
        """Every cache asked for so far."""
        return list(self._caches.values())

    async def run(self) -> None:
        """Run every cache asked for, now or later, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            while True:
                informer = await self._new.get()
                tg.create_task(informer.run(), name=f"informer:{informer.name}")


def _node_of(pod: Any) -> str | None:
    return pod.spec.nodeName if pod.spec is not None else None


def bound_pods(shared: Informers) -> cache.Cache[Any]:
    """The host's one cache of every pod bound to a node, indexed by node (``NODE_INDEX``):
    kwok's single pod watch, routed by node. A simulated kubelet subscribes to its node's
    value; a daemon follows its own pod by key."""
    return shared.informer(
        Pod,
        fields={"spec.nodeName": operators.not_equal("")},
        indexers={NODE_INDEX: cache.field_indexer(_node_of)},
        per_node="node",
    )


def nodes(shared: Informers) -> cache.Cache[Any]:
    """The host's one cache of every Node (a plugin or agent follows its own by key)."""
    return shared.informer(Node, namespace=None, per_node="name")


async def follow(informer: cache.Cache[Any], key: cache.Key) -> AsyncIterator[Any | None]:
    """Yield object ``key`` (None while absent) once the cache is synced, then after every
    change of it (coalesced: the newest state). Ends only when the consumer stops."""
    changed = asyncio.Event()
    unsubscribe = informer.subscribe(lambda _old, _new: changed.set(), key=key)
    try:
        await informer.synced.wait()
        while True:
            changed.clear()
            yield informer.get(*key)
            await changed.wait()
    finally:
        unsubscribe()


async def wait_until(
    informer: cache.Cache[Any], key: cache.Key, ready: Callable[[Any], bool]
) -> Any:
    """Return object ``key`` once it exists and ``ready(obj)`` holds (the caller bounds it)."""
    changed = asyncio.Event()
    unsubscribe = informer.subscribe(lambda _old, _new: changed.set(), key=key)
    try:
        await informer.synced.wait()
        while True:
            changed.clear()
            obj = informer.get(*key)
            if obj is not None and ready(obj):
                return obj
            await changed.wait()
    finally:
        unsubscribe()
