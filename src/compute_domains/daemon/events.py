"""Kubernetes Events on the daemon's own pod: what an operator must see (clique full, restarts).

``post()`` is synchronous and never blocks (a supervisor hook or a sync path calls it); the
``run()`` task creates the Events. A repeat of the same (type, reason, message) bumps ``count``
and ``lastTimestamp`` of the Event already created instead of adding another object, as the
kubelet's recorder does.

Emitting is a non-fatal side effect: a failure is logged as a warning and dropped, because
reporting must never stop the daemon from doing its work.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from typing import Final

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

from compute_domains.daemon.config import Identity

logger = logging.getLogger(__name__)

COMPONENT: Final = "compute-domain-daemon"
"""``source.component`` and ``reportingComponent`` of our Events."""
NORMAL: Final = "Normal"
WARNING: Final = "Warning"

CLIQUE_FULL: Final = "CliqueFull"
"""Our node cannot join: every slot of the clique is taken."""
IMEX_RESTARTED: Final = "ImexRestarted"
"""nvidia-imex exited unexpectedly and is restarted after a backoff."""

_QUEUE_LIMIT = 64


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class PodEvents:
    """Events about one pod (ours); see the module docstring."""

    def __init__(self, client: AsyncClient, ident: Identity) -> None:
        self._client = client
        self._ident = ident
        self._queue: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue(_QUEUE_LIMIT)
        self._sent: dict[tuple[str, str, str], tuple[str, int]] = {}

    def post(self, kind: str, reason: str, message: str) -> None:
        """Queue one Event (dropped with a warning when the queue is full)."""
        try:
            self._queue.put_nowait((kind, reason, message))
        except asyncio.QueueFull:
            logger.warning("event queue full; dropping %s %s: %s", kind, reason, message)

    async def run(self) -> None:
        """Create queued Events until cancelled."""
        while True:
            key = await self._queue.get()
            try:
                await self._emit(*key)
            except (httpx.HTTPError, OSError) as err:
                # Not fatal: an Event is a report, the daemon's work does not depend on it.
                logger.warning("cannot record event %s on our pod: %s", key[1], err)

    async def _emit(self, kind: str, reason: str, message: str) -> None:
        key = (kind, reason, message)
        ident = self._ident
        now = _now()
        seen = self._sent.get(key)
        if seen is not None:
            name, count = seen
            body = {"count": count + 1, "lastTimestamp": now.isoformat()}
            try:
                await self._client.patch(Event, name, body, namespace=ident.pod_namespace)
            except ApiError as err:
                if err.status.code != 404:
                    raise
                del self._sent[key]  # the Event expired; start a new one below
            else:
                self._sent[key] = (name, count + 1)
                return
        name = f"{ident.pod_name}.{uuid.uuid4().hex[:16]}"
        event = Event(
            metadata=ObjectMeta(name=name, namespace=ident.pod_namespace),
            involvedObject=ObjectReference(
                apiVersion="v1",
                kind="Pod",
                name=ident.pod_name,
                namespace=ident.pod_namespace,
                uid=ident.pod_uid,
            ),
            type=kind,
            reason=reason,
            message=message[:1024],
            source=EventSource(component=COMPONENT, host=ident.node_name),
            reportingComponent=COMPONENT,
            reportingInstance=ident.node_name,
            firstTimestamp=now,
            lastTimestamp=now,
            count=1,
        )
        await self._client.create(event)
        self._sent[key] = (name, 1)
