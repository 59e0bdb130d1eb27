"""DRANET's ResourceSlices for every node of one node agent, kept by one shared publisher.

DRANET publishes through the kubelet-plugin helper: one pool per node, named after the node,
in one slice (``resourceSliceCount: 1``) named ``<node>-dra.net-<random>`` (``generateName``),
owned by the Node, with the node's devices; a slice that is deleted or changed by someone else
is put back. Real DRANET does that in every node's pod; here one publisher per node agent (a
node host runs 144 nodes) keeps all its nodes' slices, with one watch over the ``dra.net``
slices instead of one per node, so a large sim gains no per-node watch. Nodes are published
from a de-duplicating queue; failures retry with back-off. A node that stops keeps its slice
(as a node whose DRANET pod is gone keeps it until the Node goes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceSlice

from compute_domains.infra import backoff, kube
from compute_domains.infra.kube import watch as kube_watch
from compute_domains.sim.dranet import inventory

logger = logging.getLogger(__name__)

_RETRY = backoff.Backoff(initial=0.5, maximum=30.0)


class SlicePublisher:
    """Keeps the ``dra.net`` slice of each node it was given equal to the node's devices."""

    def __init__(
        self, client: AsyncClient, devices: Callable[[str], list[dict[str, Any]] | None]
    ) -> None:
        """Args: devices: node name → its wanted devices; None for a node not ours."""
        self._client = client
        self._devices = devices
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._failures: dict[str, int] = {}
        self.published: dict[str, asyncio.Event] = {}
        """Node → set once its slice was written (or found) as wanted."""

    def publish(self, node: str) -> None:
        """(Re)publish ``node``'s slice soon."""
        self.published.setdefault(node, asyncio.Event())
        if node not in self._queued:
            self._queued.add(node)
            self._queue.put_nowait(node)

    async def run(self) -> None:
        """Publish queued nodes and follow the slices until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._worker(), name="dranet-slices")
            tg.create_task(self._watch(), name="dranet-slices-watch")

    async def _worker(self) -> None:
        while True:
            node = await self._queue.get()
            self._queued.discard(node)
            try:
                with kube.translated(f"publishing the dra.net ResourceSlice of {node}"):
                    await self._reconcile(node)
            except kube.KubeError as err:
                n = self._failures.get(node, 0)
                self._failures[node] = n + 1
                delay = _RETRY.delay(n)
                logger.warning("%s; retrying in %.1fs", err, delay, extra={"node": node})
                asyncio.get_running_loop().call_later(delay, self.publish, node)
            else:
                self._failures.pop(node, None)
                self.published[node].set()

    async def _reconcile(self, node: str) -> None:
        wanted = self._devices(node)
        if wanted is None:
            return
        fields: dict[str, Any] = {"spec.nodeName": node, "spec.driver": inventory.DRIVER}
        found = [s async for s in self._client.list(ResourceSlice, fields=fields)]
        ours = found[0] if found else None
        for extra in found[1:]:
            assert extra.metadata is not None and extra.metadata.name
            try:
                await self._client.delete(ResourceSlice, extra.metadata.name)
            except kube.NotFound:
                pass
        if ours is not None and _same(_spec(ours).get("devices"), wanted):
            return
        pool = _spec(ours).get("pool", {}) if ours is not None else {}
        spec = {
            "driver": inventory.DRIVER,
            "nodeName": node,
            "pool": {
                "name": node,
                "generation": int(pool.get("generation", 0)) + (1 if ours is not None else 0),
                "resourceSliceCount": 1,
            },
            "devices": wanted,
        }
        if ours is None:
            owner = await self._client.get(Node, node)
            assert owner.metadata is not None
            body: dict[str, Any] = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {
                    "generateName": f"{node}-{inventory.DRIVER}-",
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": node,
                            "uid": owner.metadata.uid,
                            "controller": True,
                        }
                    ],
                },
                "spec": spec,
            }
            await self._client.create(cast(ResourceSlice, ResourceSlice.from_dict(body)))
            logger.info("published the dra.net ResourceSlice", extra={"node": node})
            return
        body = ours.to_dict()
        body["spec"] = spec
        await self._client.replace(cast(ResourceSlice, ResourceSlice.from_dict(body)))
        logger.info("republished the dra.net ResourceSlice", extra={"node": node})

    async def _watch(self) -> None:
        fields: dict[str, Any] = {"spec.driver": inventory.DRIVER}
        async for item in kube_watch.stream(
            self._client, ResourceSlice, name="resourceslices:dra.net", fields=fields
        ):
            if isinstance(item, kube_watch.Listed):
                present = {_spec(o).get("nodeName") for o in item.objects}
                for name in list(self.published):
                    if name not in present:
                        self.publish(name)
                for obj in item.objects:
                    self._judge(obj)
            elif item.type == "DELETED":
                gone = _spec(item.obj).get("nodeName")
                if gone in self.published:
                    self.publish(str(gone))
            else:
                self._judge(item.obj)

    def _judge(self, obj: ResourceSlice) -> None:
        node = _spec(obj).get("nodeName")
        if node in self.published and self.published[node].is_set():
            if not _same(_spec(obj).get("devices"), self._devices(node) or []):
                self.publish(node)


def _same(current: Any, wanted: list[dict[str, Any]]) -> bool:
    """Whether the published devices are the wanted ones, by name and attributes (fields the
    API server might add are no difference, so a write never chases its own echo)."""
    if not isinstance(current, list) or len(current) != len(wanted):
        return False
    return all(
        c.get("name") == w["name"] and c.get("attributes") == w["attributes"]
        for c, w in zip(current, wanted, strict=True)
    )


def _spec(obj: ResourceSlice | None) -> dict[str, Any]:
    if obj is None:
        return {}
    spec: dict[str, Any] = obj.to_dict().get("spec", {})
    return spec
