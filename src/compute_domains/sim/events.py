"""Kubernetes Events from a simulated kubelet (reason, message, involved object, source)."""

from __future__ import annotations

import datetime
import logging
import uuid

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Pod

logger = logging.getLogger(__name__)


class EventRecorder:
    """Writes ``core/v1`` Events as the kubelet of one node."""

    def __init__(self, client: AsyncClient, node: str) -> None:
        self._client = client
        self._node = node

    async def pod(
        self, pod: Pod, kind: str, reason: str, message: str, field_path: str | None = None
    ) -> None:
        """Record an event about a pod (``kind`` is ``Normal`` or ``Warning``)."""
        meta = pod.metadata
        assert meta is not None and meta.name and meta.namespace
        ref = ObjectReference(
            apiVersion="v1",
            kind="Pod",
            name=meta.name,
            namespace=meta.namespace,
            uid=meta.uid,
            fieldPath=field_path,
        )
        await self._emit(meta.namespace, ref, kind, reason, message)

    async def _emit(
        self, namespace: str, ref: ObjectReference, kind: str, reason: str, message: str
    ) -> None:
        stamp = datetime.datetime.now(datetime.UTC)
        event = Event(
            metadata=ObjectMeta(name=f"{ref.name}.{uuid.uuid4().hex[:12]}", namespace=namespace),
            involvedObject=ref,
            reason=reason,
            message=message,
            type=kind,
            source=EventSource(component="kubelet", host=self._node),
            firstTimestamp=stamp,
            lastTimestamp=stamp,
            count=1,
            reportingComponent="kubelet",
            reportingInstance=self._node,
        )
        try:
            await self._client.create(event)
        except ApiError as err:
            # Events are advice to people; losing one must never stop a pod.
            logger.warning(
                "could not record event %s on %s: %s",
                reason,
                ref.name,
                err.status.message,
                extra={"node": self._node},
            )
