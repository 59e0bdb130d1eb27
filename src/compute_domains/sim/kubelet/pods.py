"""One pod on a simulated node, from binding to deletion, as a kubelet runs it.

``PodWorker.run()`` sets the pod's sandbox up (address, ``/etc/hosts``, volumes, DRA claims
prepared through the driver's plugin), runs init containers in order and then the containers,
each under its restart policy with back-off and its probes, and publishes the pod's status
(bursts coalesced into one write). Anything that is not ready yet (a missing ConfigMap, a
claim the plugin cannot prepare) is reported as a kubelet does (event + waiting reason) and
retried with back-off. ``terminate()`` stops containers with SIGTERM, the grace period, then
SIGKILL, unprepares the claims and deletes the pod object.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.containers import runtime
from compute_domains.infra import kube
from compute_domains.sim import images
from compute_domains.sim.kubelet import events, podstatus, probes, volumes

logger = logging.getLogger(__name__)

CdiResolver = Callable[
    [list[str], dict[str, str], list[runtime.Mount]],
    tuple[dict[str, str], list[runtime.DeviceNode], list[runtime.Mount]],
]
"""The runtime's CDI step: (CDI ids, env, mounts) → the container's env, device nodes, mounts."""


class PrepareError(Exception):
    """DRA preparation failed; the message is the kubelet's (shown in the pod's event)."""


class CreateError(Exception):
    """The runtime cannot create the container (waiting reason ``CreateContainerError``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class KubeletSettings:
    """Timings and behaviour of the simulated kubelet."""

    restart_backoff_s: float = 2.0
    """First container restart back-off (the real kubelet uses 10 s, doubling to 5 min)."""
    restart_backoff_cap_s: float = 40.0
    """Cap of the container restart back-off."""
    retry_backoff_s: float = 1.0
    """First retry delay for volumes and DRA preparation."""
    retry_backoff_cap_s: float = 10.0
    """Cap of that retry delay."""
    relist_s: float = 0.1
    """How long after its start a container is reported running. The real kubelet learns of a
    start at its next PLEG relist (every 1 s), so what a container prints at once is in its log
    before its pod turns Ready; NVIDIA's tests rely on that."""


@dataclasses.dataclass(kw_only=True, slots=True)
class NodeServices:
    """What a pod worker uses from its node (owned by the node)."""

    name: str
    ip: str
    root: Path
    client: AsyncClient
    runtime: runtime.Runtime
    recorder: events.EventRecorder
    images: images.ImageRegistry
    settings: KubeletSettings
    api_host: str
    api_port: int
    prepare: Callable[[Pod], Awaitable[dict[str, list[tuple[list[str], list[str]]]]]]
    """DRA prepare: pod claim name → [(request names, CDI device ids)]; raises PrepareError."""
    unprepare: Callable[[Pod], Awaitable[None]]
    resolve_cdi: CdiResolver
    release_ip: Callable[[str], None]
    logs_dir: Path


class PodWorker:
    """Runs one pod; ``run()`` ends when the pod is gone from the node."""

    def __init__(self, svc: NodeServices, pod: Pod, pod_ip: str) -> None:
        self._svc = svc
        self.pod = pod
        meta = pod.metadata
        assert meta is not None and meta.uid and meta.name and meta.namespace
        self.uid, self.name, self.namespace = meta.uid, meta.name, meta.namespace
        self.ip = pod_ip
        self._records: list[podstatus.ContainerRecord] = []
        self._published: dict[str, str] = {}
        """Condition type → status this kubelet last wrote (to notice others' rewrites)."""
        self._running: dict[str, runtime.Running] = {}
        self._sandbox_ready = False
        self._since: dict[str, str] = {}
        self._start_time = podstatus.now()
        self._message = ""
        self._dirty = asyncio.Event()
        self._stop = asyncio.Event()
        self._grace = 30.0
        self._gone = False
        self._log = logging.LoggerAdapter(
            logger, {"pod": f"{self.namespace}/{self.name}", "node": svc.name}
        )

    @property
    def spec(self) -> Any:
        """The pod spec."""
        return self.pod.spec

    def update(self, pod: Pod) -> None:
        """A newer version of the pod object arrived from the watch.

        Someone else may have rewritten our status: the node lifecycle controller marks every
        pod of a NotReady node ``Ready=False``. Like the kubelet's status manager, republish
        when the server's conditions differ from what this kubelet last wrote, or pods stay
        NotReady forever after their node recovers.
        """
        self.pod = pod
        server = _conditions(pod)
        if self._published and any(server.get(k) != v for k, v in self._published.items()):
            self._changed()

    def terminate(self, grace: float, gone: bool = False) -> None:
        """Begin termination; ``gone`` when the API object was force-deleted already."""
        self._grace = grace
        self._gone = self._gone or gone
        self._stop.set()

    def running(self, name: str) -> runtime.Running | None:
        """A container's running instance (``kubectl logs -f`` and ``exec``); None when the
        container does not run."""
        return self._running.get(name)

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
        publisher = asyncio.create_task(self._publisher(), name=f"status:{self.name}")
        main = asyncio.create_task(self._lifecycle(), name=f"pod:{self.name}")
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({main, stop}, return_when=asyncio.FIRST_COMPLETED)
            if main.done() and not main.cancelled() and main.exception() is not None:
                self._log.error("pod worker failed", exc_info=main.exception())
            await self._stop.wait()  # a finished pod stays until deleted
            # Kill first: the container loops see the stop flag and do not restart.
            await self._kill_all(self._grace)
            main.cancel()
            await asyncio.gather(main, return_exceptions=True)
            await self._svc.unprepare(self.pod)
        except asyncio.CancelledError:
            # Node stop (power cut): containers die at once; nothing is reported.
            self._gone = True
            # The container loops run in ``main``, not in this task: stop them restarting what
            # the power cut kills, then end them (else a rebooted node ran every container twice).
            self._stop.set()
            await self._kill_all(0, report=False)
            main.cancel()
            await asyncio.gather(main, return_exceptions=True)
            raise
        finally:
            stop.cancel()
            self._dirty.set()
            publisher.cancel()
            await asyncio.gather(publisher, stop, return_exceptions=True)
            self._svc.release_ip(self.ip)
            for rec in self._records:
                self._svc.runtime.remove(self._cid(rec.name))
        if not self._gone:
            await self._delete_object()
        self._log.info("pod removed from node")

    def _cid(self, container: str) -> str:
        return f"{self.uid}_{container}"

    async def _delete_object(self) -> None:
        try:
            await self._svc.client.delete(Pod, self.name, namespace=self.namespace, grace_period=0)
        except httpx.HTTPError as err:
            if not kube.is_not_found(err):
                self._log.warning("final delete failed: %s", kube.server_message(err))

    def _changed(self) -> None:
        self._dirty.set()

    async def _publisher(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self._gone:
                continue
            status = podstatus.build(
                self._records,
                sandbox_ready=self._sandbox_ready,
                pod_ip=self.ip,
                host_ip=self._svc.ip,
                start_time=self._start_time,
                since=self._since,
                message=self._message,
            )
            self._published = {c["type"]: c["status"] for c in status["conditions"]}
            try:
                await self._svc.client.patch(
                    Pod.Status, self.name, {"status": status}, namespace=self.namespace
                )
            except httpx.HTTPError as err:
                if kube.is_not_found(err):
                    return
                self._log.warning("status update failed: %s", kube.server_message(err))
                self._dirty.set()
                await asyncio.sleep(0.5)

    async def _retrying(self, what: Callable[[], Awaitable[Any]], reason: str, waiting: str) -> Any:
        delay = self._svc.settings.retry_backoff_s
        last = ""
        while True:
            try:
                return await what()
            except (volumes.VolumeError, PrepareError, volumes.EnvError, httpx.HTTPError) as err:
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
                self._changed()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._svc.settings.retry_backoff_cap_s)

    async def _lifecycle(self) -> None:
        self._changed()
        ctx = volumes.PodContext(
            pod=self.pod,
            node_name=self._svc.name,
            node_ip=self._svc.ip,
            pod_ip=self.ip,
            node_root=self._svc.root,
            api_host=self._svc.api_host,
            api_port=self._svc.api_port,
        )
        vol_paths: dict[str, str] = await self._retrying(
            lambda: volumes.setup_volumes(self._svc.client, ctx), "FailedMount", "volumes not ready"
        )
        claims: dict[str, list[tuple[list[str], list[str]]]] = {}
        if self.spec.resourceClaims:
            claims = await self._retrying(
                lambda: self._prepare(),
                "FailedPrepareDynamicResources",
                "waiting for dynamic resources",
            )
        self._write_hosts()
        self._sandbox_ready = True
        self._changed()
        for idx, c in enumerate(self.spec.initContainers or []):
            rc = await self._container_loop(c, self._records[idx], ctx, vol_paths, claims)
            if rc != 0:
                return
        mains = [r for r in self._records if not r.init]
        await asyncio.gather(
            *(
                self._container_loop(c, rec, ctx, vol_paths, claims)
                for c, rec in zip(self.spec.containers, mains, strict=True)
            )
        )

    async def _prepare(self) -> dict[str, list[tuple[list[str], list[str]]]]:
        try:
            return await self._svc.prepare(self.pod)
        except PrepareError as err:
            raise PrepareError(
                f"Failed to prepare dynamic resources: prepare dynamic resources: {err}"
            ) from err

    def _hosts_path(self) -> Path:
        return self._svc.root / "var/lib/kubelet/pods" / self.uid / "etc-hosts"

    def _write_hosts(self) -> None:
        name = self.spec.hostname or self.name
        lines = [
            "# Kubernetes-managed hosts file.",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            f"{self.ip}\t{name}",
        ]
        path = self._hosts_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")

    async def _config(
        self,
        c: Any,
        ctx: volumes.PodContext,
        vol_paths: dict[str, str],
        claims: dict[str, list[tuple[list[str], list[str]]]],
    ) -> runtime.ContainerConfig:
        env = await volumes.container_env(self._svc.client, ctx, c)
        # The kubelet expands command and args from the container's own environment; the
        # runtime adds the CDI edits' env later, so they are no source of ``$(VAR)`` values.
        command = [volumes.expand(a, env) for a in c.command or []]
        args = [volumes.expand(a, env) for a in c.args or []]
        mounts = volumes.container_mounts(c, vol_paths)
        mounts.append(runtime.Mount(source=str(self._hosts_path()), target="/etc/hosts"))
        cdi_ids: list[str] = []
        for ref in c.resources.claims if c.resources and c.resources.claims else []:
            for requests, ids in claims.get(ref.name, []):
                if not ref.request or not requests or ref.request in requests:
                    cdi_ids.extend(ids)
        devices: list[runtime.DeviceNode] = []
        if cdi_ids:
            # CDI edits apply to the whole config: an edit replaces the env entry or mount the
            # pod gave at the same name or path, as containerd applies them to its OCI spec.
            env, devices, mounts = self._svc.resolve_cdi(cdi_ids, env, mounts)
        argv = self._svc.images.command(c.image or "", command, args)
        env = self._svc.images.environment(env, c.image or "")
        hostname = "" if self.spec.hostNetwork else (self.spec.hostname or self.name)
        image_root = self._svc.images.image_root(c.image or "")
        return runtime.ContainerConfig(
            image_root=str(image_root) if image_root is not None else "",
            argv=tuple(argv),
            env=env,
            workdir=c.workingDir or "",
            hostname=hostname[:63],
            address=self.ip,
            mounts=tuple(mounts),
            devices=tuple(devices),
        )

    def _should_restart(self, rec: podstatus.ContainerRecord, rc: int) -> bool:
        policy = self.spec.restartPolicy or "Always"
        if rec.init:
            return rc != 0 and policy != "Never"
        return policy == "Always" or (policy == "OnFailure" and rc != 0)

    async def _container_loop(
        self,
        c: Any,
        rec: podstatus.ContainerRecord,
        ctx: volumes.PodContext,
        vol_paths: dict[str, str],
        claims: dict[str, list[tuple[list[str], list[str]]]],
    ) -> int:
        delay = self._svc.settings.restart_backoff_s
        while True:
            try:
                cfg = await self._config(c, ctx, vol_paths, claims)
            except (volumes.EnvError, images.ImageError, CreateError) as err:
                reason = {
                    volumes.EnvError: "CreateContainerConfigError",
                    images.ImageError: "ErrImagePull",
                    CreateError: "CreateContainerError",
                }[type(err)]
                if rec.reason != reason or rec.message != str(err):
                    rec.wait(reason, str(err))
                    self._changed()
                    await self._svc.recorder.pod(self.pod, "Warning", "Failed", f"Error: {err}")
                await asyncio.sleep(delay)
                continue
            rc = await self._run_once(c, rec, cfg)
            rec.will_restart = self._should_restart(rec, rc) and not self._stop.is_set()
            self._changed()
            if not rec.will_restart:
                return rc
            rec.restart_count += 1
            msg = f"back-off {delay:.0f}s restarting failed container={c.name} pod={self.name}"
            rec.wait("CrashLoopBackOff", msg)
            self._changed()
            await self._svc.recorder.pod(
                self.pod,
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {c.name} in pod {self.name}",
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            if self._stop.is_set():
                return rc
            delay = min(delay * 2, self._svc.settings.restart_backoff_cap_s)

    async def _run_once(
        self, c: Any, rec: podstatus.ContainerRecord, cfg: runtime.ContainerConfig
    ) -> int:
        if self._stop.is_set():
            return 143
        cid = self._cid(c.name)
        log_path = self.container_log(c.name)
        running = await self._svc.runtime.start(cid, cfg, log_path)
        self._running[c.name] = running
        ended = asyncio.ensure_future(running.child.proc.wait())
        try:
            await asyncio.wait({ended}, timeout=self._svc.settings.relist_s)  # the relist
        except asyncio.CancelledError:
            running.child.kill()
            raise
        finally:
            ended.cancel()
        rec.state, rec.reason, rec.message = "running", "", ""
        rec.started_at = podstatus.now()
        rec.container_id = f"sim://{cid}-{rec.restart_count}"
        rec.started = c.startupProbe is None
        rec.ready = c.readinessProbe is None and rec.started
        self._changed()
        await self._svc.recorder.pod(
            self.pod,
            "Normal",
            "Started",
            f"Started container {c.name}",
            f"spec.containers{{{c.name}}}",
        )
        prober = probes.Prober(
            self._svc.runtime, running, c, rec, self._changed, self._log, pod_ip=self.ip
        )
        probe_task = asyncio.create_task(prober.run(), name=f"probes:{self.name}/{c.name}")
        try:
            rc = await running.child.proc.wait()
            running.child.end_group()
        except asyncio.CancelledError:
            # The worker ends while this container runs (one started after the stop began):
            # it must not outlive its pod.
            running.child.kill()
            raise
        finally:
            probe_task.cancel()
            await asyncio.gather(probe_task, return_exceptions=True)
            self._running.pop(c.name, None)
        tail = running.child.log_tail(3) if rc == 127 else ""
        rec.terminate(rc, "StartError" if rc == 127 and "not found" in tail else None, tail)
        if prober.killed_reason:
            await self._svc.recorder.pod(self.pod, "Normal", "Killing", prober.killed_reason)
        self._changed()
        return rc

    async def _kill_all(self, grace: float, *, report: bool = True) -> None:
        """Stop every running container; ``report=False`` for a power cut, which records no
        event (and must kill even when the API server is gone already, as at sim teardown)."""
        running = list(self._running.items())
        for name, _ in running if report else []:
            await self._svc.recorder.pod(
                self.pod, "Normal", "Killing", f"Stopping container {name}"
            )
        await asyncio.gather(*(r.child.stop(grace) for _, r in running))
        for rec in self._records:
            if rec.state == "running":
                rec.terminate(rec.exit_code or 143)
        with contextlib.suppress(Exception):
            self._changed()


def _conditions(pod: Pod) -> dict[str, str]:
    """Condition type → status of the pod as the server has it (ours only: no PodScheduled)."""
    conds = (pod.status.conditions if pod.status else None) or []
    return {str(c.type): str(c.status) for c in conds if c.type != "PodScheduled"}
