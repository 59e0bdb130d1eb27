"""An informer: a watched, indexed, read-your-writes cache of one kind of object, shared.

``run()`` follows :func:`watch.stream`: a ``Listed`` snapshot replaces the store (differences
are reported as changes), each ``Changed`` event updates it. Several consumers in one process
(component instances hosted side by side) share one cache: each :meth:`Cache.subscribe`\\s a
handler and reads through the indexes, while one task runs the single list+watch.

Invariants:
- ``synced`` is set once the first list has been stored; readers wait for it.
- Indexes map an index value to store keys and are updated with every store change.
- Every change is reported to every subscriber as ``handler(old, new)`` (``new`` None for a
  deletion), in subscription order; handlers must not block (they only enqueue work). A handler
  that raises is logged and does not stop the others or the cache. A subscriber may ask for the
  changes of one object only (``key``) or of one index value only (``index``/``value``, e.g.
  the pods of one node): those are routed by dictionary, so a cache shared by hundreds of
  consumers does not call each of them for every change.
- A re-list (after 410 Gone or a failure) reports the differences to the stored state as
  changes, so subscribers never see a re-list as such, only what changed meanwhile.
- ``observe(obj)`` puts an object a consumer itself just wrote into the store unless the store
  already holds a newer version, so the next read sees that write even before the watch
  delivers it (client-go's mutation cache). Versions compare as integers, which is what the
  API server's etcd-backed versions are; a non-numeric version always wins.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Generic, TypeVar

from compute_domains.infra import backoff, logs
from compute_domains.infra.kube import raw, watch

logger = logging.getLogger(__name__)

R = TypeVar("R")
Key = tuple[str, str]
Indexer = Callable[[Any], Iterable[str]]
ChangeHandler = Callable[[Any, Any], None]
ALL_NAMESPACES: Final = "*"


def object_key(obj: Any) -> Key:
    """``(namespace, name)`` of an object ("" namespace for cluster-scoped ones)."""
    meta = obj.metadata
    return (meta.namespace or "", meta.name or "")


def label_indexer(label: str) -> Indexer:
    """An indexer by the value of one label (objects without it are not indexed)."""

    def index(obj: Any) -> Iterable[str]:
        value = (obj.metadata.labels or {}).get(label)
        return () if value is None else (value,)

    return index


def namespace_indexer(obj: Any) -> Iterable[str]:
    """An indexer by namespace (cluster-scoped objects are not indexed)."""
    namespace = obj.metadata.namespace
    return (namespace,) if namespace else ()


def field_indexer(get: Callable[[Any], object]) -> Indexer:
    """An indexer by the field ``get(obj)`` returns (a pod's ``spec.nodeName``); None/"" skip."""

    def index(obj: Any) -> Iterable[str]:
        value = get(obj)
        return () if value is None or value == "" else (str(value),)

    return index


def _version(obj: Any) -> int | None:
    try:
        return int(obj.metadata.resourceVersion)
    except (TypeError, ValueError):
        return None


class Cache(Generic[R]):
    """List+watch cache of one resource type with optional selection, indexes and subscribers.

    ``namespace`` is one namespace, ``ALL_NAMESPACES``, or None for cluster-scoped kinds;
    ``keep`` narrows the selection further on the client (``watch.stream``).
    """

    def __init__(
        self,
        client: Any,
        resource: type[R],
        *,
        name: str,
        namespace: str | None = ALL_NAMESPACES,
        labels: Mapping[str, Any] | None = None,
        fields: Mapping[str, Any] | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        watch_timeout_s: int = 300,
        relist_backoff: backoff.Backoff | None = None,
        keep: raw.Keep | None = None,
    ) -> None:
        self.name = name
        self._keep = keep
        self._client = client
        self._resource = resource
        self._namespace = namespace
        self._labels = labels
        self._fields = fields
        self._indexers = dict(indexers or {})
        self._handlers: list[ChangeHandler] = []
        self._by_key: dict[Key, list[ChangeHandler]] = {}
        self._by_value: dict[str, dict[str, list[ChangeHandler]]] = {}
        self._watch_timeout_s = watch_timeout_s
        self._backoff = relist_backoff or backoff.Backoff(initial=0.2, maximum=10.0)
        self._store: dict[Key, R] = {}
        self._index: dict[str, dict[str, set[Key]]] = {n: {} for n in self._indexers}
        self.synced = asyncio.Event()

    def subscribe(
        self,
        handler: ChangeHandler,
        *,
        key: Key | None = None,
        index: str | None = None,
        value: str | None = None,
    ) -> Callable[[], None]:
        """Report later changes to ``handler``: every change, or only those of the object
        ``key``, or only those of objects whose indexer ``index`` yields ``value`` (before or
        after the change). Returns the call that unsubscribes it."""
        if key is not None:
            handlers = self._by_key.setdefault(key, [])
        elif index is not None:
            if index not in self._indexers or value is None:
                raise ValueError(f"informer {self.name}: no index {index!r} (or no value)")
            handlers = self._by_value.setdefault(index, {}).setdefault(value, [])
        else:
            handlers = self._handlers
        handlers.append(handler)

        def unsubscribe() -> None:
            if handler in handlers:
                handlers.remove(handler)

        return unsubscribe

    def add_indexer(self, index: str, indexer: Indexer) -> None:
        """Index the store by ``indexer`` too (a consumer joining a shared cache); an index
        of that name already there is kept (consumers name indexes by what they compute)."""
        if index in self._indexers:
            return
        self._indexers[index] = indexer
        self._index[index] = {}
        for key, obj in self._store.items():
            for value in indexer(obj):
                self._index[index].setdefault(value, set()).add(key)

    # ---- reading -------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> R | None:
        """The cached object, or None."""
        return self._store.get((namespace, name))

    def objects(self) -> list[R]:
        """Every cached object."""
        return list(self._store.values())

    def by_index(self, index: str, value: str) -> list[R]:
        """Cached objects whose indexer ``index`` yields ``value`` (sorted by key)."""
        keys = self._index[index].get(value, set())
        return [self._store[k] for k in sorted(keys)]

    def index_values(self, index: str) -> set[str]:
        """Every value index ``index`` currently holds."""
        return {value for value, keys in self._index[index].items() if keys}

    def observe(self, obj: R) -> None:
        """Store an object a consumer just wrote, unless a newer one is cached."""
        key = object_key(obj)
        current = self._store.get(key)
        if current is not None:
            mine, theirs = _version(obj), _version(current)
            if mine is not None and theirs is not None and mine <= theirs:
                return
        self._put(key, obj)

    # ---- store maintenance ---------------------------------------------------------------

    def _put(self, key: Key, obj: R | None) -> R | None:
        old = self._store.pop(key, None)
        if old is not None:
            for index, fn in self._indexers.items():
                for value in fn(old):
                    keys = self._index[index].get(value)
                    if keys is not None:
                        keys.discard(key)
                        if not keys:
                            del self._index[index][value]
        if obj is not None:
            self._store[key] = obj
            for index, fn in self._indexers.items():
                for value in fn(obj):
                    self._index[index].setdefault(value, set()).add(key)
        return old

    def _routed(self, old: R | None, new: R | None) -> list[ChangeHandler]:
        handlers = list(self._handlers)
        some = new if new is not None else old
        if some is not None and self._by_key:
            handlers += self._by_key.get(object_key(some), [])
        for index, routes in self._by_value.items():
            fn = self._indexers[index]
            values = {v for obj in (old, new) if obj is not None for v in fn(obj)}
            for value in sorted(values):
                handlers += routes.get(value, [])
        return handlers

    def _notify(self, old: R | None, new: R | None) -> None:
        for handler in self._routed(old, new):
            try:
                handler(old, new)
            except Exception:
                # One consumer's bug must not starve the others sharing this cache.
                logger.exception("informer %s: a change handler failed", self.name)

    def _apply(self, event: str, obj: R) -> None:
        key = object_key(obj)
        if event == "DELETED":
            old = self._put(key, None)
            self._notify(old if old is not None else obj, None)
            return
        current = self._store.get(key)
        if current is not None:
            mine, theirs = _version(obj), _version(current)
            if mine is not None and theirs is not None and mine < theirs:
                return  # an older version than one we observed ourselves
        old = self._put(key, obj)
        self._notify(old, obj)

    def _replace(self, objects: Iterable[R]) -> None:
        fresh = {object_key(obj): obj for obj in objects}
        for key in [k for k in self._store if k not in fresh]:
            old = self._put(key, None)
            self._notify(old, None)
        for key, obj in fresh.items():
            current = self._store.get(key)
            if current is not None and _version(current) == _version(obj):
                continue
            old = self._put(key, obj)
            self._notify(old, obj)

    # ---- the loop ------------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch until cancelled (one task per cache, however many subscribers)."""
        async for item in watch.stream(
            self._client,
            self._resource,
            name=self.name,
            namespace=self._namespace,
            labels=self._labels,
            fields=self._fields,
            watch_timeout_s=self._watch_timeout_s,
            retry=self._backoff,
            keep=self._keep,
        ):
            if isinstance(item, watch.Changed):
                self._apply(item.type, item.obj)
                continue
            self._replace(item.objects)
            if not self.synced.is_set():
                logger.log(
                    logs.V2,
                    "informer %s synced: Caches populated (%d objects) (reflector.go)",
                    self.name,
                    len(self._store),
                )
            self.synced.set()
