"""One Kubernetes Event recorder (core/v1) for every component: aggregated, bounded, harmless.

The same (involved object, type, reason, message) seen again bumps the existing Event's
``count`` and ``lastTimestamp`` instead of creating another object, as the kubelet's recorder
does, so a retried failure shows as one Event with a growing count.

Invariants:
- The recorder remembers at most ``remember`` distinct series, least recently used first out
  (a long-running daemon with ever-new messages holds a bounded amount of memory); a forgotten
  series that recurs starts a new Event. ``remember=0`` turns aggregation off (every occurrence
  is its own Event).
- An aggregated Event that expired on the server (404 on the bump) starts a new one; a 404 on
  create (the namespace is gone) drops the Event, since nobody can read it.
- Emitting is a non-fatal side effect: :meth:`Recorder.emit` never raises (except on
  cancellation); a failure is logged as a warning and dropped, because reporting must never
  stop a component's work.
"""

from __future__ import annotations

import collections
import datetime
import logging
import uuid
from collections.abc import Callable
from typing import Any, Final, Protocol

from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

from compute_domains.infra import errors
from compute_domains.infra.kube import errors as kube_errors

logger = logging.getLogger(__name__)

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
MESSAGE_LIMIT: Final = 1024
"""The API server refuses longer Event messages; we cut them."""

Series = tuple[str, str, str, str]


class Writer(Protocol):
    """What the recorder needs of a client (lightkube's ``AsyncClient``, the controller's Api)."""

    async def create(self, obj: Any) -> Any:
        """Create ``obj``."""

    async def patch(self, res: Any, name: str, body: Any, *, namespace: str | None = None) -> Any:
        """Merge-patch object ``name``."""


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Recorder:
    """Creates and aggregates Events for one reporting component instance.

    Args:
        writer: the client that writes Events.
        component: ``source.component`` and ``reportingComponent``.
        instance: ``reportingInstance`` (a node name, a controller identity).
        host: ``source.host`` (the node), or None.
        remember: how many distinct series to aggregate (LRU bound); 0 disables aggregation.
        now: the wall clock (tests pass a fixed one).
    """

    def __init__(
        self,
        writer: Writer,
        *,
        component: str,
        instance: str,
        host: str | None = None,
        remember: int = 256,
        now: Callable[[], datetime.datetime] = _utcnow,
    ) -> None:
        self._writer = writer
        self._component = component
        self._instance = instance
        self._host = host
        self._remember = remember
        self._now = now
        self._series: collections.OrderedDict[Series, tuple[str, int]] = collections.OrderedDict()

    def __len__(self) -> int:
        """How many series are remembered now."""
        return len(self._series)

    async def emit(self, ref: ObjectReference, kind: str, reason: str, message: str) -> None:
        """Record one occurrence about ``ref``; never raises (except on cancellation)."""
        message = message[:MESSAGE_LIMIT]
        namespace = ref.namespace or "default"
        key: Series = (ref.uid or f"{namespace}/{ref.name}", kind, reason, message)
        seen = self._series.get(key)
        try:
            if seen is not None:
                name, count = seen
                body = {"count": count + 1, "lastTimestamp": self._now().isoformat()}
                try:
                    with kube_errors.translated(f"bump event {name}"):
                        await self._writer.patch(Event, name, body, namespace=namespace)
                except kube_errors.NotFound:
                    del self._series[key]  # the Event expired on the server; start a new one
                else:
                    self._series[key] = (name, count + 1)
                    self._series.move_to_end(key)
                    return
            name = await self._create(ref, namespace, kind, reason, message)
        except kube_errors.NotFound as err:
            logger.debug("no event %s (namespace gone?): %s", reason, err)
            return
        except errors.ComputeDomainsError as err:
            # Events inform people; losing one must not fail or delay the work that told it.
            logger.warning("could not record event %s on %s: %s", reason, ref.name, err)
            return
        if self._remember <= 0:
            return
        self._series[key] = (name, 1)
        while len(self._series) > self._remember:
            self._series.popitem(last=False)

    async def _create(
        self, ref: ObjectReference, namespace: str, kind: str, reason: str, message: str
    ) -> str:
        name = f"{ref.name}.{uuid.uuid4().hex[:16]}"
        now = self._now()
        event = Event(
            metadata=ObjectMeta(name=name, namespace=namespace),
            involvedObject=ref,
            type=kind,
            reason=reason,
            message=message,
            count=1,
            firstTimestamp=now,
            lastTimestamp=now,
            source=EventSource(component=self._component, host=self._host),
            reportingComponent=self._component,
            reportingInstance=self._instance,
        )
        with kube_errors.translated(f"create event {name}"):
            await self._writer.create(event)
        return name
