"""An informer: a watched, indexed, read-your-writes cache of one kind of object.

``run()`` lists the objects (recording the list's resourceVersion), replaces the store with
them, then watches from that version; a watch that ends cleanly is resumed where it stopped,
an expired version (410) or any error leads to a fresh list after a backoff. Every change,
including differences found by a re-list, is reported to the ``on_change(old, new)`` callback
(``new`` None for a deletion), which must not block (it only enqueues work).

Invariants:
- ``synced`` is set once the first list has been stored; readers wait for it.
- Indexes map an index value to store keys and are updated with every store change.
- ``observe(obj)`` puts an object the controller itself just wrote into the store unless the
  store already holds a newer version, so the next reconcile sees its own write even before
  the watch delivers it (client-go's mutation cache). Versions compare as integers, which is
  what the API server's etcd-backed versions are; a non-numeric version always wins.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import httpx2 as httpx
from lightkube.core.exceptions import ApiError

from compute_domains.controller import kubeapi
from compute_domains.infra import backoff, logs

logger = logging.getLogger(__name__)

R = TypeVar("R")
Key = tuple[str, str]
Indexer = Callable[[Any], Iterable[str]]
ChangeHandler = Callable[[Any, Any], None]


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


def _version(obj: Any) -> int | None:
    try:
        return int(obj.metadata.resourceVersion)
    except (TypeError, ValueError):
        return None


class Informer(Generic[R]):
    """List-then-watch cache of one resource type with optional label selection and indexes.

    ``namespace`` is one namespace, ``kubeapi.ALL_NAMESPACES``, or None for cluster-scoped kinds.
    """

    def __init__(
        self,
        api: kubeapi.Api,
        resource: type[R],
        *,
        name: str,
        namespace: str | None = kubeapi.ALL_NAMESPACES,
        labels: Mapping[str, Any] | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        on_change: ChangeHandler | None = None,
        watch_timeout_s: int = 300,
        relist_backoff: backoff.Backoff | None = None,
    ) -> None:
        self.name = name
        self._api = api
        self._resource = resource
        self._namespace = namespace
        self._labels = labels
        self._indexers = dict(indexers or {})
        self._on_change = on_change
        self._watch_timeout_s = watch_timeout_s
        self._backoff = relist_backoff or backoff.Backoff(initial=0.2, maximum=10.0)
        self._store: dict[Key, R] = {}
        self._index: dict[str, dict[str, set[Key]]] = {n: {} for n in self._indexers}
        self.synced = asyncio.Event()

    # ---- reading -------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> R | None:
        """The cached object, or None."""
        return self._store.get((namespace, name))

    def objects(self) -> list[R]:
        """Every cached object."""
        return list(self._store.values())

    def by_index(self, index: str, value: str) -> list[R]:
        """Cached objects whose indexer ``index`` yields ``value``."""
        keys = self._index[index].get(value, set())
        return [self._store[k] for k in sorted(keys)]

    def index_values(self, index: str) -> set[str]:
        """Every value index ``index`` currently holds."""
        return {value for value, keys in self._index[index].items() if keys}

    def observe(self, obj: R) -> None:
        """Store an object this controller just wrote, unless a newer one is cached."""
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

    def _notify(self, old: R | None, new: R | None) -> None:
        if self._on_change is not None:
            self._on_change(old, new)

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

    def _replace(self, objects: dict[Key, R]) -> None:
        for key in [k for k in self._store if k not in objects]:
            old = self._put(key, None)
            self._notify(old, None)
        for key, obj in objects.items():
            current = self._store.get(key)
            if current is not None and _version(current) == _version(obj):
                continue
            old = self._put(key, obj)
            self._notify(old, obj)

    # ---- the loop ------------------------------------------------------------------------

    async def _list(self) -> str:
        resource: Any = self._resource
        labels: Any = self._labels
        listing = self._api.client.list(
            resource, namespace=self._namespace, labels=labels, chunk_size=500
        )
        objects: dict[Key, R] = {}
        async for obj in listing:
            objects[object_key(obj)] = obj
        self._replace(objects)
        return str(listing.resourceVersion)

    async def run(self) -> None:
        """List and watch until cancelled; errors are logged and followed by a re-list."""
        attempt = 0
        while True:
            try:
                # NVIDIA's (client-go's) words for these moments, at its verbosities 3 and 2,
                # with the client-go file that logs them (klog prints it; tooling greps it).
                logger.log(logs.V3, "informer %s: Listing and watching (reflector.go)", self.name)
                version = await self._list()
                if not self.synced.is_set():
                    logger.log(
                        logs.V2,
                        "informer %s synced: Caches populated (%d objects) (reflector.go)",
                        self.name,
                        len(self._store),
                    )
                self.synced.set()
                attempt = 0
                resource: Any = self._resource
                labels: Any = self._labels
                async for event, obj in self._api.client.watch(
                    resource,
                    namespace=self._namespace,
                    labels=labels,
                    resource_version=version,
                    server_timeout=self._watch_timeout_s,
                ):
                    self._apply(event, obj)
            except ApiError as err:
                if err.status.code == 410:
                    logger.debug("informer %s: watch expired, re-listing", self.name)
                    continue
                delay = self._backoff.delay(attempt)
                attempt += 1
                logger.warning(
                    "informer %s: %s; re-listing in %.1fs", self.name, err.status.message, delay
                )
                await asyncio.sleep(delay)
            except (httpx.HTTPError, OSError, ValueError) as err:
                # Transport trouble (API server restarting) or an undecodable object (lightkube's
                # models raise ValueError subclasses): both may heal, so re-list after a backoff.
                delay = self._backoff.delay(attempt)
                attempt += 1
                logger.warning("informer %s: %s; re-listing in %.1fs", self.name, err, delay)
                await asyncio.sleep(delay)
