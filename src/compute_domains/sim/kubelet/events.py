"""Kubernetes Events from a simulated kubelet (reason, message, involved object, source).

Writing goes through ``infra.kube.events.Recorder`` (the one recorder of the project) with
aggregation off: the simulator records every occurrence as its own Event, as it always has,
so what tests and people count on the simulated cluster stays as it was.
"""

from __future__ import annotations

from lightkube import AsyncClient
from lightkube.models.core_v1 import ObjectReference
from lightkube.resources.core_v1 import Pod

from compute_domains.infra.kube import events as kube_events


class EventRecorder:
    """Writes ``core/v1`` Events as the kubelet of one node."""

    def __init__(self, client: AsyncClient, node: str) -> None:
        self._recorder = kube_events.Recorder(
            client, component="kubelet", instance=node, host=node, remember=0
        )

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
        await self._recorder.emit(ref, kind, reason, message)
