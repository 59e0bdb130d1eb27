"""The controller's informers: ``infra.kube.cache.Cache`` over the controller's API door.

All the list+watch, store, index and read-your-writes logic lives in ``infra/kube/cache.py``
(shared with every component); this module only binds a cache to ``kubeapi.Api``'s client and
subscribes the controller's change handler, so the reconcile code keeps reading
``informer.Informer`` while there is one list+watch implementation in the code base.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

from compute_domains.controller import kubeapi
from compute_domains.infra import backoff
from compute_domains.infra.kube import cache

R = TypeVar("R")
V = TypeVar("V")
Key = cache.Key
Indexer = cache.Indexer
ChangeHandler = cache.ChangeHandler
object_key = cache.object_key
label_indexer = cache.label_indexer
field_indexer = cache.field_indexer


class Informer(cache.Cache[R]):
    """A shared cache bound to the controller's client, with one change handler."""

    def __init__(
        self,
        api: kubeapi.Api,
        resource: type[R],
        *,
        name: str,
        namespace: str | None = kubeapi.ALL_NAMESPACES,
        labels: Mapping[str, Any] | None = None,
        fields: Mapping[str, Any] | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        on_change: ChangeHandler | None = None,
        watch_timeout_s: int = 300,
        relist_backoff: backoff.Backoff | None = None,
    ) -> None:
        super().__init__(
            api.client,
            resource,
            name=name,
            namespace=namespace,
            labels=labels,
            fields=fields,
            indexers=indexers,
            watch_timeout_s=watch_timeout_s,
            relist_backoff=relist_backoff,
        )
        if on_change is not None:
            self.subscribe(on_change)


class PerObject(Generic[V]):
    """A value derived from a cached object, computed once per cached version: the cache
    replaces an object when it changes, so the same object (by identity) derives the same.
    Keyed by the caller's name for the object; ``forget`` drops a key."""

    def __init__(self, derive: Callable[[Any], V]) -> None:
        self._derive = derive
        self._known: dict[Hashable, tuple[Any, V]] = {}

    def of(self, key: Hashable, obj: Any) -> V:
        """The value of ``obj`` (derived when this object was not seen under ``key`` before)."""
        known = self._known.get(key)
        if known is not None and known[0] is obj:
            return known[1]
        value = self._derive(obj)
        self._known[key] = (obj, value)
        return value

    def forget(self, key: Hashable) -> None:
        """Drop what is known under ``key``."""
        self._known.pop(key, None)

    def keys(self) -> list[Hashable]:
        """The keys known now."""
        return list(self._known)
