"""One pod on a simulated node, from binding to deletion, as a kubelet runs it.

``PodWorker.run()`` sets the pod up (volumes, DRA claims prepared through the driver's plugin,
then its sandbox: ``podsandbox``, with the pod's address and ``/etc/hosts``), runs init
containers in order and then the containers (``containers.ContainerRunner``: each under its
restart policy with back-off and its probes), while ``statusmanager.StatusManager`` publishes
the pod's status (bursts coalesced into one write). Anything that is not ready yet (a missing
ConfigMap, a claim the plugin cannot prepare) is reported as a kubelet does (event + waiting
reason) and retried with back-off. ``terminate()`` stops containers with SIGTERM, the grace
period, then SIGKILL, stops the sandbox, unprepares the claims and deletes the pod object.
The worker owns the pod's container records, its stop flag and its logger (pod and node keys),
which its sandbox and status manager log to.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube.resources.core_v1 import Pod

from compute_domains.containers import runtime
from compute_domains.infra import kube
from compute_domains.sim.kubelet import (
    containers,
    environment,
    errors,
    nri,
    podsandbox,
    podstatus,
    services,
    statusmanager,
    volumes,
)

logger = logging.getLogger(__name__)


class PodWorker:
    """Runs one pod; ``run()`` ends when the pod is gone from the node."""

    def __init__(self, svc: services.NodeServices, pod: Pod, pod_ip: str) -> None:
        self._svc = svc
        self.pod = pod
        meta = pod.metadata
        assert meta is not None and meta.uid and meta.name and meta.namespace
        self.uid, self.name, self.namespace = meta.uid, meta.name, meta.namespace
        self.ip = pod_ip
        self._records: list[podstatus.ContainerRecord] = []
        self._stop = asyncio.Event()
        self._grace = 30.0
        self._gone = False
        self._log = logging.LoggerAdapter(
            logger, {"pod": f"{self.namespace}/{self.name}", "node": svc.name}
        )
        self._status = statusmanager.StatusManager(
            svc,
            name=self.name,
            namespace=self.namespace,
            ip=pod_ip,
            records=self._records,
            gone=lambda: self._gone,
            log=self._log,
        )
        self._containers = containers.ContainerRunner(
            svc, self, self._stop, self._records, self._log
        )

    @property
    def spec(self) -> Any:
        """The pod spec."""
        return self.pod.spec

    def update(self, pod: Pod) -> None:
        """A newer version of the pod object arrived from the watch (its status manager
        republishes when someone else rewrote our conditions: ``StatusManager.update``)."""
        self.pod = pod
        self._status.update(pod)

    def terminate(self, grace: float, gone: bool = False) -> None:
        """Begin termination; ``gone`` when the API object was force-deleted already."""
        self._grace = grace
        self._gone = self._gone or gone
        self._stop.set()

    def running(self, name: str) -> runtime.Running | None:
        """A container's running instance (``kubectl logs -f`` and ``exec``); None when the
        container does not run."""
        return self._containers.running.get(name)

    def container_log(self, name: str) -> Path:
        """Where a container's output is kept (read by ``kubectl logs``)."""
        return self._svc.logs_dir / f"{self.namespace}_{self.name}_{self.uid}" / f"{name}.log"

    async def run(self) -> None:
        """Set up, run containers until told to stop, then clean up."""
        spec = self.spec
        for c in spec.initContainers or []:
            self._records.append(
                podstatus.ContainerRecord(
                    name=c.name, image=c.image or "", init=True, reason="PodInitializing"
                )
            )
        for c in spec.containers:
            self._records.append(podstatus.ContainerRecord(name=c.name, image=c.image or ""))
        # A pod this node ran before its last boot: its containers died with the node.
        status = self.pod.status
        before = (
            {
                cs.name: cs
                for cs in [*(status.initContainerStatuses or []), *(status.containerStatuses or [])]
            }
            if status
            else {}
        )
        for rec in self._records:
            podstatus.after_reboot(rec, before.get(rec.name))
        publisher = asyncio.create_task(self._status.run(), name=f"status:{self.name}")
        main = asyncio.create_task(self._lifecycle(), name=f"pod:{self.name}")
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({main, stop}, return_when=asyncio.FIRST_COMPLETED)
            if main.done() and not main.cancelled() and main.exception() is not None:
                self._log.error("pod worker failed", exc_info=main.exception())
            await self._stop.wait()  # a finished pod stays until deleted
            # Kill first: the container loops see the stop flag and do not restart.
            await self._containers.kill_all(self._grace)
            main.cancel()
            await asyncio.gather(main, return_exceptions=True)
            await podsandbox.stop(self._svc, self.sandbox(), self._log)
            await self._svc.unprepare(self.pod)
        except asyncio.CancelledError:
            # Node stop (power cut): containers die at once; nothing is reported.
            self._gone = True
            # The container loops run in ``main``, not in this task: stop them restarting what
            # the power cut kills, then end them (else a rebooted node ran every container twice).
            self._stop.set()
            await self._containers.power_cut()
            main.cancel()
            await asyncio.gather(main, return_exceptions=True)
            raise
        finally:
            stop.cancel()
            self._status.changed()
            publisher.cancel()
            await asyncio.gather(publisher, stop, return_exceptions=True)
            self._svc.release_ip(self.ip)
            for rec in self._records:
                self._svc.runtime.remove(self._containers.cid(rec.name))
        if not self._gone:
            await self._delete_object()
        self._log.info("pod removed from node")

    async def _delete_object(self) -> None:
        try:
            await self._svc.client.delete(Pod, self.name, namespace=self.namespace, grace_period=0)
        except httpx.HTTPError as err:
            if not kube.is_not_found(err):
                self._log.warning("final delete failed: %s", kube.server_message(err))

    def changed(self) -> None:
        """The pod's status needs publishing (bursts coalesce into one write)."""
        self._status.changed()

    async def _retrying(
        self,
        what: Callable[[], Awaitable[Any]],
        reason: str,
        waiting: str,
        *,
        first_delay: float | None = None,
    ) -> Any:
        delay = self._svc.settings.retry_backoff_s if first_delay is None else first_delay
        last = ""
        while True:
            try:
                return await what()
            except (
                volumes.VolumeError,
                errors.PrepareError,
                nri.NriError,
                environment.EnvError,
                httpx.HTTPError,
            ) as err:
                # An API refusal here is usually transient (e.g. the Node authorizer has not
                # seen the pod yet when its ServiceAccount token is requested): retry it too.
                msg = kube.server_message(err)
                if msg != last:
                    self._log.warning("%s: %s", reason, msg)
                    await self._svc.recorder.pod(self.pod, "Warning", reason, msg)
                    last = msg
                for rec in self._records:
                    if rec.state == "waiting" and rec.reason in (
                        "ContainerCreating",
                        "PodInitializing",
                    ):
                        rec.message = waiting
                self.changed()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._svc.settings.retry_backoff_cap_s)

    async def _lifecycle(self) -> None:
        self.changed()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        ctx = environment.PodContext(
            pod=self.pod,
            node_name=self._svc.name,
            node_ip=self._svc.ip,
            pod_ip=self.ip,
            node_root=self._svc.root,
            api_host=self._svc.api_host,
            api_port=self._svc.api_port,
        )
        vol_paths: dict[str, str] = await self._retrying(
            lambda: volumes.setup_volumes(self._svc.client, ctx),
            "FailedMount",
            "volumes not ready",
            first_delay=self._svc.settings.volume_retry_s,
        )
        t_vols = loop.time()
        claims: containers.Claims = {}
        if self.spec.resourceClaims:
            claims = await self._retrying(
                lambda: self._prepare(),
                "FailedPrepareDynamicResources",
                "waiting for dynamic resources",
            )
        t_claims = loop.time()
        await self._retrying(
            lambda: podsandbox.run(
                self._svc, self.sandbox(), host_network=bool(self.spec.hostNetwork)
            ),
            "FailedCreatePodSandBox",
            "waiting for the pod sandbox",
        )
        podsandbox.write_hosts(
            self.hosts_path(), hostname=self.spec.hostname or self.name, ip=self.ip
        )
        self._status.sandbox_ready = True
        self.changed()
        # One line per pod start: where a slow formation spends its time on the node (the
        # benchmarks' per-phase analysis reads it; a real kubelet logs the same steps at -v=3).
        self._log.info(
            "pod start-up: volumes and claims %.3fs (claims %.3fs), sandbox %.3fs",
            t_claims - t0,
            t_claims - t_vols,
            loop.time() - t_claims,
        )
        for idx, c in enumerate(self.spec.initContainers or []):
            rc = await self._containers.loop(c, self._records[idx], ctx, vol_paths, claims)
            if rc != 0:
                return
        mains = [r for r in self._records if not r.init]
        await asyncio.gather(
            *(
                self._containers.loop(c, rec, ctx, vol_paths, claims)
                for c, rec in zip(self.spec.containers, mains, strict=True)
            )
        )

    def sandbox(self) -> nri.Sandbox:
        """The pod's sandbox as the runtime's NRI plugins see it."""
        return podsandbox.view(
            self._svc.root,
            uid=self.uid,
            namespace=self.namespace,
            name=self.name,
            ip=self.ip,
            host_network=bool(self.spec.hostNetwork),
        )

    async def _prepare(self) -> containers.Claims:
        try:
            return await self._svc.prepare(self.pod)
        except errors.PrepareError as err:
            raise errors.PrepareError(
                f"Failed to prepare dynamic resources: prepare dynamic resources: {err}"
            ) from err

    def hosts_path(self) -> Path:
        """The pod's ``/etc/hosts`` on the node (mounted into each container)."""
        return podsandbox.hosts_path(self._svc.root, self.uid)
