"""The write half of a CD's status sync: stamp, pace, patch, announce.

``StatusWriter.write`` takes a derived status (``status.Derived``) and the stored one. Conditions
keep their ``lastTransitionTime`` while their status holds (``conditions.merged``). The write is
one JSON-patch replace of ``/status`` (so an empty node list really clears ``nodes``), made only
when the stored status differs (``statuschange.differs``), and is put back into the cache at once
so the next pass does not write it again (and the watch's echo of it starts no pass, ``caches``).
A change that is only progress (``statuschange.urgent``) is written at most once per interval per
CD: a sooner one is deferred by re-enqueueing the CD for when the interval is over; a verdict
change is written at once. Node transitions between the stored and the written status become
Events (``NodeJoined``, ``NodeLeft``, ``NodeNotReady``, ``NodeReady``), one per group of nodes
that stand at the same place.

It logs through the logger it is handed (``statussync``'s), so its lines keep that logger name.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from lightkube.types import PatchType

from compute_domains.api import conditions
from compute_domains.api.computedomain import (
    ComputeDomain,
    ComputeDomainStatus,
    ComputeDomainStatusResource,
)
from compute_domains.controller import caches, events, kubeapi, metrics, status, statuschange


def _ready_reason(st: ComputeDomainStatus | None) -> str:
    """``reason: message`` of the Ready condition ("" when there is none)."""
    cond = st.condition(conditions.READY) if st is not None else None
    return f"{cond.reason}: {cond.message}" if cond is not None else ""


class StatusWriter:
    """Writes CDs' derived statuses when they changed, paced, and announces node transitions."""

    def __init__(
        self,
        *,
        api: kubeapi.Api,
        cache: caches.Caches,
        interval: float,
        recorder: events.EventRecorder,
        meter: metrics.Metrics,
        enqueue: Callable[[str, float], None],
        clock: Callable[[], float],
        log: logging.Logger,
    ) -> None:
        self._api = api
        self._cache = cache
        self._interval = interval
        self._events = recorder
        self._metrics = meter
        self._enqueue = enqueue
        self._clock = clock
        self._log = log
        self._written_at: dict[str, float] = {}
        """CD UID → when we last wrote its status (progress writes wait for the interval)."""

    async def write(
        self, cd: ComputeDomain, previous: ComputeDomainStatus | None, derived: status.Derived
    ) -> None:
        """Write ``derived`` for CD ``cd`` if it differs from the stored status (paced).

        Raises:
            errors.ComputeDomainsError: the status write failed.
        """
        raw = self._cache.cd(cd.uid)
        current = raw.get("status") if raw is not None else None
        stamped = conditions.merged(
            previous.conditions if previous is not None else (),
            derived.status.conditions,
            at=conditions.now(),
        )
        desired = dataclasses.replace(derived.status, conditions=stamped)
        if not statuschange.differs(current, desired):
            return
        now = self._clock()
        interval = self._interval
        wait = self._written_at.get(cd.uid, now - interval) + interval - now
        if wait > 0 and not statuschange.urgent(previous, desired):
            self._enqueue(cd.uid, wait)  # progress only: written with the next change
            return
        patch = [{"op": "add", "path": "/status", "value": desired.to_dict()}]
        updated = await self._api.patch(
            ComputeDomainStatusResource,
            cd.name,
            patch,
            namespace=cd.namespace,
            patch_type=PatchType.JSON,
        )
        self._metrics.status_writes.inc()
        self._cache.cds.observe(updated)
        self._written_at = {k: t for k, t in self._written_at.items() if now - t < interval}
        self._written_at[cd.uid] = now
        log = {"cd": f"{cd.namespace}/{cd.name}"}
        old_reason = _ready_reason(previous)
        new_reason = _ready_reason(desired)
        if previous is None or previous.status is not desired.status or old_reason != new_reason:
            self._log.info(
                "status %s (%d/%d nodes ready, %s)",
                desired.status.value,
                desired.ready_nodes,
                desired.total_nodes,
                new_reason,
                extra=log,
            )
        for group in statuschange.grouped(statuschange.transitions(previous, derived)):
            await self._announce(cd, group)

    async def _announce(self, cd: ComputeDomain, group: list[statuschange.Transition]) -> None:
        change = group[0]
        where = statuschange.where(change.entry)
        nodes = ", ".join(c.node for c in group)
        if change.kind == "joined":
            kind, reason = events.NORMAL, events.NODE_JOINED
            message = f"node{'s' if len(group) > 1 else ''} {nodes} joined ({where})"
        elif change.kind == "left":
            kind, reason = events.NORMAL, events.NODE_LEFT
            message = (
                f"nodes {nodes} left (their workloads and daemons are gone)"
                if len(group) > 1
                else f"node {nodes} left (its workload and daemon are gone)"
            )
        elif change.kind == "ready":
            kind, reason = events.NORMAL, events.NODE_READY
            message = f"node {change.node} is Ready again ({where})"
        else:
            kind, reason = events.WARNING, events.NODE_NOT_READY
            message = f"node {change.node} is not Ready: {change.why or 'its daemon is not Ready'}"
        self._log.info(message, extra={"cd": f"{cd.namespace}/{cd.name}", "node": nodes})
        await self._events.emit(events.target(cd), kind, reason, message)
