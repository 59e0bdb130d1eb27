"""Publish this node's ResourceSlice and keep it so: republish on drift, deletion or holder change.

The slice (``devices.slice_spec``) has a fixed name, ``<node>-compute-domain.nvidia.com``, one
pool named after the node and an owner reference to the Node (controller), so it goes away with
the Node. A watch on the slices of our driver and node (field selectors ``spec.nodeName`` and
``spec.driver``) marks the state dirty when our slice is deleted (the kubelet wipes a node's
slices when it restarts or after a plugin has been gone for 30 s), changed by someone else, or
when a foreign slice of ours appears (an older plugin's, deleted as obsolete); ``poke`` marks it
dirty when the node's holder changed. One reconcile task brings the API to the wanted state,
bumping the pool generation on every content change, from the slices as the watch shows them
(a LIST only before the watch listed and after a failed write, whose retry reads fresh; a
replaced slice keeps its owner reference, so only a new one reads the Node); failures retry
with backoff. A plugin
given its host's shared caches (a virtual node) follows the slices of its node in the host's one
cache of our driver's slices (indexed by node) instead of its own watch. Slices are
left in place at shutdown, as upstream does: a restarting plugin must not flap its devices.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from compute_domains.api import names
from compute_domains.infra import backoff, kube
from compute_domains.infra.kube import cache, informers
from compute_domains.infra.kube import watch as kube_watch
from compute_domains.plugin import devices

logger = logging.getLogger(__name__)

_RETRY = backoff.Backoff(initial=0.5, maximum=30.0)


class SlicePublisher:
    """Keeps one node's ResourceSlice equal to the wanted content."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        node: str,
        channel_slots: int,
        holder: Callable[[], str],
        shared: informers.Informers | None = None,
    ) -> None:
        self._client = client
        self._shared = shared
        self._node = node
        self._slots = channel_slots
        self._holder = holder
        self._name = devices.slice_name(node)
        self._dirty = asyncio.Event()
        self._dirty.set()
        self.published = asyncio.Event()
        """Set once the wanted content was written (or found) at least once."""
        self._fields: dict[str, Any] = {"spec.nodeName": node, "spec.driver": names.DRIVER_NAME}
        self._known: dict[str, ResourceSlice] | None = None
        """Our node's slices as the watch (or the host's cache) last showed them; None until it
        listed, and again after a failed write, so that the next reconcile reads them fresh."""

    def poke(self, delay: float = 0.0) -> None:
        """Recompute and republish soon (the holder changed); after ``delay`` seconds if given
        (``PluginSettings.holder_publish_delay_s``, a fault drill's knob)."""
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, self._dirty.set)
        else:
            self._dirty.set()

    async def run(self) -> None:
        """Publish, then follow the slices until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._reconcile_loop(), name=f"slice-reconcile:{self._node}")
            tg.create_task(self._watch_loop(), name=f"slice-watch:{self._node}")

    def _wanted(self) -> list[dict[str, Any]]:
        return devices.slice_devices(self._slots, self._holder())

    async def _reconcile_loop(self) -> None:
        failures = 0
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                with kube.translated("publishing the ResourceSlice"):
                    await self._reconcile()
            except kube.KubeError as err:
                self._known = None  # our view may be stale (a conflict): list on the retry
                delay = _RETRY.delay(failures)
                failures += 1
                logger.warning(
                    "%s; retrying in %.1fs",
                    err,
                    delay,
                    extra={"node": self._node},
                )
                await asyncio.sleep(delay)
                self._dirty.set()
            else:
                failures = 0
                self.published.set()

    async def _current(self) -> list[ResourceSlice]:
        """Our node's slices: from the watched view once it listed (a holder change in a
        per-domain formation republishes every node's slice, and a LIST per republish is one
        more request per node), else from the API server."""
        if self._known is not None:
            return list(self._known.values())
        return [item async for item in self._client.list(ResourceSlice, fields=self._fields)]

    async def _reconcile(self) -> None:
        ours: ResourceSlice | None = None
        for item in await self._current():
            name = item.metadata.name if item.metadata else None
            if name == self._name:
                ours = item
            elif name:
                logger.info("deleting obsolete ResourceSlice %s", name, extra={"node": self._node})
                try:
                    with kube.translated(f"deleting ResourceSlice {name}"):
                        await self._client.delete(ResourceSlice, name)
                except kube.NotFound:
                    pass  # gone already: that is what we wanted
        wanted = self._wanted()
        if ours is not None and self._matches(ours, wanted):
            return
        generation = 1
        if ours is not None:
            current = ours.to_dict().get("spec", {}).get("pool", {}).get("generation", 0)
            generation = int(current) + 1
        owners = ours.to_dict().get("metadata", {}).get("ownerReferences") if ours else None
        # Our slice keeps its owner (the Node); only a new slice needs the Node's UID.
        meta: dict[str, Any] = {
            "name": self._name,
            "ownerReferences": owners or [await self._owner()],
        }
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": meta,
            "spec": devices.slice_spec(self._node, self._slots, self._holder(), generation),
        }
        if ours is None:
            written = await self._client.create(_slice(body))
            action = "published"
        else:
            assert ours.metadata is not None
            meta["resourceVersion"] = ours.metadata.resourceVersion
            written = await self._client.replace(_slice(body))
            action = "republished"
        if self._known is not None:
            # What we wrote is the newest, until the watch says otherwise: a second republish
            # before its event must not write with the old resourceVersion (a conflict).
            self._known[self._name] = written
        logger.info(
            "%s ResourceSlice %s (generation %d, holder %s)",
            action,
            self._name,
            generation,
            self._holder() or "none",
            extra={"node": self._node},
        )

    def _matches(self, obj: ResourceSlice, wanted: list[dict[str, Any]]) -> bool:
        spec = obj.to_dict().get("spec", {})
        pool = spec.get("pool", {})
        return (
            spec.get("nodeName") == self._node
            and pool.get("name") == self._node
            and pool.get("resourceSliceCount") == 1
            and devices.same_devices(spec.get("devices"), wanted)
        )

    async def _owner(self) -> dict[str, Any]:
        node = await self._client.get(Node, self._node)
        uid = node.metadata.uid if node.metadata else None
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "name": self._node,
            "uid": uid,
            "controller": True,
        }

    async def _watch_loop(self) -> None:
        if self._shared is not None:
            await self._follow_shared(self._shared)
            return
        # infra.kube.watch.stream lists, watches, resumes and re-lists; we only judge states.
        async for item in kube_watch.stream(
            self._client, ResourceSlice, name=f"resourceslices:{self._node}", fields=self._fields
        ):
            if isinstance(item, kube_watch.Listed):
                self._known = {}
                seen = [(o.metadata.name if o.metadata else None) for o in item.objects]
                if self._name not in seen:
                    self._dirty.set()
                for obj in item.objects:
                    self._judge("ADDED", obj)
            else:
                self._judge(item.type, item.obj)

    async def _follow_shared(self, shared: informers.Informers) -> None:
        slices = shared.informer(
            ResourceSlice,
            namespace=None,
            fields={"spec.driver": names.DRIVER_NAME},
            indexers={informers.NODE_INDEX: cache.field_indexer(_node_of)},
            per_node="node",
        )

        def changed(old: ResourceSlice | None, new: ResourceSlice | None) -> None:
            if new is None:
                if old is not None:
                    self._judge("DELETED", old)
            else:
                self._judge("MODIFIED", new)

        unsubscribe = slices.subscribe(changed, index=informers.NODE_INDEX, value=self._node)
        try:
            await slices.synced.wait()
            self._known = {}
            mine = slices.by_index(informers.NODE_INDEX, self._node)
            if self._name not in [o.metadata.name if o.metadata else None for o in mine]:
                self._dirty.set()
            for obj in mine:
                self._judge("ADDED", obj)
            await asyncio.Event().wait()  # changes arrive through ``changed``
        finally:
            unsubscribe()

    def _judge(self, op: str, obj: ResourceSlice) -> None:
        """Follow our node's slices; mark ours dirty when a change leaves it missing, stale,
        or not alone."""
        name = obj.metadata.name if obj.metadata else None
        if self._known is not None and name:
            if op == "DELETED":
                self._known.pop(name, None)
            else:
                self._known[name] = obj
        if op == "DELETED" and name != self._name:
            return
        if op == "DELETED" or name != self._name or not self._matches(obj, self._wanted()):
            self._dirty.set()


def _node_of(obj: ResourceSlice) -> str | None:
    return obj.spec.nodeName if obj.spec is not None else None


def _slice(body: dict[str, Any]) -> ResourceSlice:
    return cast(ResourceSlice, ResourceSlice.from_dict(body))
