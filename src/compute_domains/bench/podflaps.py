"""What the driver's pods did while it was installed: status writes and Ready transitions.

Issue 28: resident IMEX agents went Ready → NotReady → Ready during ``helm install`` on nodes
with no ComputeDomain; each flap is two pod status writes per node and keeps ``helm --wait``
waiting. ``PodFlaps`` watches the pods of the driver's namespace from before helm starts until
it is stopped and counts, per component (the pod's ``app.kubernetes.io/component`` label, or
its name without the node-specific suffix), every write that changed a pod's ``status`` and
every change of its ``Ready`` condition, NotReady after Ready (a flap) separately. A pod seen
for the first time counts its current Ready state as no transition.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import time
from typing import Any

import httpx2 as httpx
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod

COMPONENT_LABEL = "app.kubernetes.io/component"


@dataclasses.dataclass(slots=True)
class Counts:
    """One component's counts over the watched window."""

    pods: int = 0
    """Pods seen."""
    status_writes: int = 0
    """Watch events whose ``status`` differed from the pod's previous one."""
    ready_transitions: int = 0
    """Changes of the Ready condition (either way), a pod's first state not counted."""
    flaps: int = 0
    """Ready → NotReady while the pod stayed (a Ready pod turning NotReady)."""

    def line(self) -> str:
        """``pods P, status writes W, Ready transitions T (F Ready→NotReady)``."""
        return (
            f"pods {self.pods}, status writes {self.status_writes}, Ready transitions "
            f"{self.ready_transitions} ({self.flaps} Ready→NotReady)"
        )


def _component(pod: Any) -> str:
    labels = (pod.metadata.labels or {}) if pod.metadata else {}
    if labels.get(COMPONENT_LABEL):
        return str(labels[COMPONENT_LABEL])
    name = str(pod.metadata.name)
    return name.rsplit("-", 1)[0] if "-" in name else name


def _ready(pod: Any) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _status(pod: Any) -> Any:
    return pod.status.to_dict() if pod.status is not None else None


class PodFlaps:
    """Counts the status writes and Ready transitions of a namespace's pods (module doc)."""

    def __init__(self, client: AsyncClient, namespace: str) -> None:
        self._client = client
        self._namespace = namespace
        self._last: dict[str, tuple[Any, bool]] = {}
        self.counts: dict[str, Counts] = collections.defaultdict(Counts)
        """Per component."""
        self._task: asyncio.Task[None] | None = None
        self._t0 = 0.0
        self.flapped: list[str] = []
        """``<pod> on <node> at <s>`` for every Ready → NotReady (seconds since ``start``)."""

    def start(self) -> None:
        """Begin watching (the namespace may not exist yet)."""
        self._t0 = time.monotonic()
        self._task = asyncio.create_task(self._watch(), name="pod-flaps")

    async def stop(self) -> dict[str, Counts]:
        """Stop watching; the counts per component."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return dict(self.counts)

    def summary(self) -> str:
        """One line per component, sorted by name."""
        return "; ".join(f"{name}: {c.line()}" for name, c in sorted(self.counts.items()))

    def see(self, op: str, pod: Any) -> None:
        """Account for one watch event."""
        uid = str(pod.metadata.uid)
        if op == "DELETED":
            self._last.pop(uid, None)
            return
        counts = self.counts[_component(pod)]
        status, ready = _status(pod), _ready(pod)
        before = self._last.get(uid)
        self._last[uid] = (status, ready)
        if before is None:
            counts.pods += 1
            return
        if status != before[0]:
            counts.status_writes += 1
        if ready != before[1]:
            counts.ready_transitions += 1
            if before[1]:
                counts.flaps += 1
                node = pod.spec.nodeName if pod.spec else ""
                at = time.monotonic() - self._t0
                self.flapped.append(f"{pod.metadata.name} on {node} at {at:.1f}s")

    async def _watch(self) -> None:
        while True:
            # From the start of history of the namespace's pods: a watch without a version
            # sends every existing pod as ADDED first, then each change.
            # Only what a watch raises (the API's refusal, the transport): a defect in ``see``
            # must fail the run, not read as a quiet install.
            with contextlib.suppress(ApiError, httpx.HTTPError):
                async for op, pod in self._client.watch(Pod, namespace=self._namespace):
                    self.see(op, pod)
            await asyncio.sleep(0.2)  # the namespace may not exist yet, or the watch ended
