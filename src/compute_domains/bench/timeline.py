"""A watch-fed log of what happens in a cluster during a fault: the 64+8 scenario's timeline.

``Timeline.run()`` follows nodes, the namespace's pods, the ComputeDomain's daemon pods and the
ComputeDomain itself, and appends a ``Mark`` for every transition that a person reading the
guide's failure timeline (shared/seeds/002 §15.6) asks about: a node turning NotReady or Ready,
a pod created, bound, Ready, marked for deletion (with the reason the API gives, e.g. the
scheduler's preemption), gone; a daemon pod's restart; a CD ``status.nodes`` entry whose status
or index changed. Each mark is stamped when its watch event arrives (no sampling period), with
``time.monotonic()``.

Invariants:
- The first ``Listed`` snapshot of each stream records the state without marks (``baseline``);
  a re-list after a watch failure diffs against what was known, so nothing is marked twice.
- ``until(check)`` wakes on every change and returns once ``check`` holds; it never polls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.api import computedomain, names
from compute_domains.infra.kube import watch


@dataclasses.dataclass(frozen=True, slots=True)
class Mark:
    """One transition: ``what`` happened to ``name`` (``detail`` says more)."""

    at: float
    what: str
    """``node-not-ready``, ``node-ready``, ``pod-created``, ``pod-bound``, ``pod-ready``,
    ``pod-deleting``, ``pod-gone``, ``daemon-restart`` or ``entry``."""
    name: str
    detail: str = ""


def _ready(obj: Any) -> bool:
    conditions = (obj.status.conditions if obj.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _deleting_reason(pod: Any) -> str:
    """Why the pod is being deleted, as its DisruptionTarget condition says (else "")."""
    for c in (pod.status.conditions if pod.status else None) or []:
        if c.type == "DisruptionTarget" and c.status == "True":
            return f"{c.reason}: {c.message}" if c.message else str(c.reason)
    return ""


def _restarts(pod: Any) -> int:
    statuses = (pod.status.containerStatuses if pod.status else None) or []
    return sum(cs.restartCount or 0 for cs in statuses)


@dataclasses.dataclass(slots=True)
class _PodState:
    node: str
    ready: bool
    deleting: bool
    restarts: int


class Timeline:
    """Follows one CD's world and marks its transitions (module docstring)."""

    def __init__(self, client: AsyncClient, *, namespace: str, driver_ns: str, cd: str) -> None:
        self._client, self._ns, self._driver_ns, self._cd = client, namespace, driver_ns, cd
        self.marks: list[Mark] = []
        self.nodes: dict[str, bool] = {}
        """Node name → Ready."""
        self.pods: dict[str, Any] = {}
        """Pods of the namespace, by name (their last state)."""
        self.daemons: dict[str, Any] = {}
        """Daemon pods of every CD, by name (their last state)."""
        self.entries: dict[str, dict[str, Any]] = {}
        """The CD's ``status.nodes`` entries by node name."""
        self.cd_status: tuple[str, str, str] = ("-", "", "")
        """The CD's ``status.status`` and its Ready condition's reason and message."""
        self._pod_states: dict[str, _PodState] = {}
        self._daemon_states: dict[str, _PodState] = {}
        self._changed = asyncio.Event()
        self._synced: set[str] = set()

    def mark(self, what: str, name: str, detail: str = "") -> None:
        """Append a mark now (also used by callers for their own steps, e.g. a node stop)."""
        self.marks.append(Mark(time.monotonic(), what, name, detail))

    def since(self, t0: float) -> list[Mark]:
        """Marks at or after ``t0``, in order."""
        return [m for m in self.marks if m.at >= t0]

    def first(self, t0: float, what: str, name: str | None = None) -> Mark | None:
        """The first mark of kind ``what`` (for ``name``) at or after ``t0``."""
        return next(
            (m for m in self.since(t0) if m.what == what and name in (None, m.name)),
            None,
        )

    async def until(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        """Return once ``check()`` holds (re-checked after every change).

        Raises:
            TimeoutError: not within ``timeout`` seconds; the message names ``what``.
        """

        async def wait() -> None:
            while not (self._synced >= {"nodes", "pods", "daemons", "cd"} and check()):
                self._changed.clear()
                await self._changed.wait()

        try:
            async with asyncio.timeout(timeout):
                await wait()
        except TimeoutError:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s") from None

    async def run(self) -> None:
        """Follow the four streams until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._follow(Node, None, None, self._on_node, "nodes"))
            tg.create_task(self._follow(Pod, self._ns, None, self._on_pod, "pods"))
            tg.create_task(
                self._follow(
                    Pod,
                    self._driver_ns,
                    {names.COMPUTE_DOMAIN_LABEL: None},
                    self._on_daemon,
                    "daemons",
                )
            )
            tg.create_task(
                self._follow(computedomain.ComputeDomainResource, self._ns, None, self._on_cd, "cd")
            )

    async def _follow(
        self,
        res: Any,
        namespace: str | None,
        labels: dict[str, Any] | None,
        handle: Callable[[Any, bool], None],
        stream: str,
    ) -> None:
        known: dict[str, Any] = {}
        async for item in watch.stream(
            self._client, res, name=f"timeline-{stream}", namespace=namespace, labels=labels
        ):
            quiet = stream not in self._synced
            if isinstance(item, watch.Listed):
                listed = {o.metadata.name: o for o in item.objects}
                for name in set(known) - set(listed):
                    handle(known[name], True)  # deleted while the stream was down
                known = listed
                for obj in listed.values():
                    if quiet:
                        self._baseline(handle, obj)
                    else:
                        handle(obj, False)
                self._synced.add(stream)
            else:
                name = item.obj.metadata.name
                if item.type == "DELETED":
                    known.pop(name, None)
                else:
                    known[name] = item.obj
                handle(item.obj, item.type == "DELETED")
            self._changed.set()

    def _baseline(self, handle: Callable[[Any, bool], None], obj: Any) -> None:
        count = len(self.marks)
        handle(obj, False)
        del self.marks[count:]  # the state before the run is not a transition

    def _on_node(self, node: Any, deleted: bool) -> None:
        name = str(node.metadata.name)
        ready = _ready(node) and not deleted
        before = self.nodes.get(name)
        self.nodes[name] = ready
        if before is not None and before != ready:
            self.mark("node-ready" if ready else "node-not-ready", name)

    def _on_pod(self, pod: Any, deleted: bool) -> None:
        self._pod_transitions(pod, deleted, self._pod_states, self.pods, daemon=False)

    def _on_daemon(self, pod: Any, deleted: bool) -> None:
        self._pod_transitions(pod, deleted, self._daemon_states, self.daemons, daemon=True)

    def _pod_transitions(
        self,
        pod: Any,
        deleted: bool,
        states: dict[str, _PodState],
        store: dict[str, Any],
        *,
        daemon: bool,
    ) -> None:
        name = str(pod.metadata.name)
        prefix = "daemon" if daemon else "pod"
        old = states.get(name)
        now = _PodState(
            node=str((pod.spec.nodeName if pod.spec else None) or ""),
            ready=_ready(pod),
            deleting=pod.metadata.deletionTimestamp is not None,
            restarts=_restarts(pod),
        )
        if deleted:
            states.pop(name, None)
            store.pop(name, None)
            self.mark(f"{prefix}-gone", name, now.node)
            return
        states[name], store[name] = now, pod
        if old is None:
            self.mark(f"{prefix}-created", name, now.node)
            old = _PodState(node="", ready=False, deleting=False, restarts=now.restarts)
        if now.node and not old.node:
            self.mark(f"{prefix}-bound", name, now.node)
        if now.ready and not old.ready:
            self.mark(f"{prefix}-ready", name, now.node)
        if not now.ready and old.ready:
            self.mark(f"{prefix}-not-ready", name, now.node)
        if now.deleting and not old.deleting:
            self.mark(f"{prefix}-deleting", name, _deleting_reason(pod))
        if now.restarts > old.restarts:
            self.mark(f"{prefix}-restart", name, now.node)

    def _on_cd(self, obj: Any, deleted: bool) -> None:
        if obj.metadata.name != self._cd:
            return
        data = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
        status = {} if deleted else dict(data.get("status") or {})
        entries = {str(n["name"]): dict(n) for n in status.get("nodes") or []}
        for name in sorted(set(entries) | set(self.entries)):
            new, old = entries.get(name), self.entries.get(name)
            if new == old:
                continue
            if new is None:
                self.mark("entry", name, "removed")
            elif old is None or (old.get("status"), old.get("index")) != (
                new.get("status"),
                new.get("index"),
            ):
                self.mark("entry", name, f"{new.get('status')} index {new.get('index')}")
        self.entries = entries
        ready: dict[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
        )
        self.cd_status = (
            str(status.get("status") or "-"),
            str(ready.get("reason") or ""),
            str(ready.get("message") or ""),
        )
