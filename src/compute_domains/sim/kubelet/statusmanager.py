"""The status manager of one pod on a simulated node: publishes its status as a kubelet does.

``StatusManager.run()`` writes the status ``podstatus.build`` makes from the pod worker's
container records whenever it was told (``changed``) that something moved: bursts coalesce
into one write, and a status equal to the last one written is not written again. ``update``
sees each newer pod object from the watch and notices when someone else rewrote this kubelet's
conditions (the node lifecycle controller marks every pod of a NotReady node ``Ready=False``):
then the next pass writes again, also when the other write arrived while one of ours was in
flight. The pod worker (``pods.PodWorker``) owns the records and the pod's lifecycle; this
module owns only what was published and when to publish again. Its messages go to the worker's
logger (pod and node keys).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
from lightkube.resources.core_v1 import Pod

from compute_domains.infra import kube
from compute_domains.sim.kubelet import podstatus, services


class StatusManager:
    """Publishes one pod's status; ``run()`` ends when the pod object is gone."""

    def __init__(
        self,
        svc: services.NodeServices,
        *,
        name: str,
        namespace: str,
        ip: str,
        records: list[podstatus.ContainerRecord],
        gone: Callable[[], bool],
        log: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self._svc = svc
        self._name, self._namespace, self._ip = name, namespace, ip
        self._records = records
        self._gone = gone
        """True once nothing is to be reported any more (power cut, object deleted)."""
        self._log = log
        self._published: dict[str, str] = {}
        """Condition type → status this kubelet last wrote (to notice others' rewrites)."""
        self._written: dict[str, Any] | None = None
        """The status last written, None when the next one must be written whatever it is."""
        self._before: dict[str, str] = {}
        """The conditions of the write before the last (a late echo of it is not a rewrite)."""
        self._overwritten = 0
        """How often another writer's conditions arrived (``update``): a write in flight
        meanwhile is not taken as the server's state."""
        self.sandbox_ready = False
        """The pod's sandbox is up (condition ``PodReadyToStartContainers``)."""
        self._since: dict[str, str] = {}
        self._start_time = podstatus.now()
        self._message = ""
        self._dirty = asyncio.Event()

    def update(self, pod: Pod) -> None:
        """A newer version of the pod object arrived from the watch.

        Someone else may have rewritten our status: the node lifecycle controller marks every
        pod of a NotReady node ``Ready=False``. Like the kubelet's status manager, republish
        when the server's conditions differ from what this kubelet last wrote, or pods stay
        NotReady forever after their node recovers.
        """
        server = _conditions(pod)
        if self._published and any(server.get(k) != v for k, v in self._published.items()):
            self._written = None
            # Not the echo of our previous write (before our first: a version without Ready,
            # from before any write of ours), so someone else's.
            before: dict[str, str | None] = {**self._before} or {"Ready": None}
            if any(server.get(k) != v for k, v in before.items()):
                self._overwritten += 1
            self.changed()

    def changed(self) -> None:
        """The pod's status needs publishing (bursts coalesce into one write)."""
        self._dirty.set()

    async def run(self) -> None:
        """Write the pod's status each time it changed, until the pod object is gone."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self._gone():
                continue
            status = podstatus.build(
                self._records,
                sandbox_ready=self.sandbox_ready,
                pod_ip=self._ip,
                host_ip=self._svc.ip,
                start_time=self._start_time,
                since=self._since,
                message=self._message,
            )
            if status == self._written:
                # The kubelet's status manager writes a status only when it changed: a probe
                # or a retry that changes nothing costs the API server and every watcher of
                # the pod nothing.
                continue
            self._before = self._published
            self._published = {c["type"]: c["status"] for c in status["conditions"]}
            overwritten = self._overwritten
            try:
                await self._svc.client.patch(
                    Pod.Status, self._name, {"status": status}, namespace=self._namespace
                )
                # Someone rewrote our conditions while this write was in flight (its answer can
                # come after the watch delivered their write): the server's status is not ours,
                # so the next pass writes again instead of taking it as written.
                self._written = status if self._overwritten == overwritten else None
            except httpx.HTTPError as err:
                if kube.is_not_found(err):
                    return
                self._log.warning("status update failed: %s", kube.server_message(err))
                self._written = None
                self._dirty.set()
                await asyncio.sleep(0.5)


def _conditions(pod: Pod) -> dict[str, str]:
    """Condition type → status of the pod as the server has it (ours only: no PodScheduled)."""
    conds = (pod.status.conditions if pod.status else None) or []
    return {str(c.type): str(c.status) for c in conds if c.type != "PodScheduled"}
