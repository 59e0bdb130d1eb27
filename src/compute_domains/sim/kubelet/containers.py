"""The containers of one pod on a simulated node: create, run under the restart policy, kill.

``ContainerRunner.loop`` is one container's life as the kubelet runs it: build its config (env,
``$(VAR)``-expanded command and args, volume mounts, the pod's ``/etc/hosts``, the CDI devices of
the claims it references, applied by the runtime's CDI step), start it, report it running after
the relist delay, run its probes, and on exit restart it with doubling back-off while the
restart policy says so (``CrashLoopBackOff``). A config that cannot be built is a waiting reason
(``CreateContainerConfigError``, ``ErrImagePull``, ``CreateContainerError``) retried at the
back-off. ``kill_all`` stops every running container (SIGTERM, grace, SIGKILL), ``power_cut``
kills them (SIGKILL only). The pod worker (``pods.PodWorker``) owns the records and the stop
flag; this module only changes records and tells the worker (``changed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any, Protocol

from lightkube.resources.core_v1 import Pod

from compute_domains.containers import runtime
from compute_domains.sim import images
from compute_domains.sim.kubelet import environment, errors, nri, podstatus, probes, services

Claims = dict[str, list[tuple[list[str], list[str]]]]
"""Pod claim name → [(request names, CDI device ids)], as DRA preparation returned them."""


class PodView(Protocol):
    """What a pod's containers need from its worker."""

    pod: Pod
    name: str
    uid: str
    ip: str

    def changed(self) -> None:
        """The pod's status needs publishing."""

    def container_log(self, name: str) -> Path:
        """Where a container's output is kept."""

    def hosts_path(self) -> Path:
        """The pod's ``/etc/hosts`` file on the node."""

    def sandbox(self) -> nri.Sandbox:
        """The pod's sandbox as NRI plugins see it."""


class ContainerRunner:
    """Runs the containers of one pod; ``running`` holds each running container's instance."""

    def __init__(
        self,
        svc: services.NodeServices,
        pod: PodView,
        stop: asyncio.Event,
        records: list[podstatus.ContainerRecord],
        log: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self._svc = svc
        self._pod = pod
        self._stop = stop
        self._records = records
        self._log = log
        self.running: dict[str, runtime.Running] = {}

    def cid(self, container: str) -> str:
        """The runtime's id of a container of this pod."""
        return f"{self._pod.uid}_{container}"

    async def _config(
        self, c: Any, ctx: environment.PodContext, vol_paths: dict[str, str], claims: Claims
    ) -> runtime.ContainerConfig:
        env = await environment.container_env(self._svc.client, ctx, c)
        # The kubelet expands command and args from the container's own environment; the
        # runtime adds the CDI edits' env later, so they are no source of ``$(VAR)`` values.
        command = [environment.expand(a, env) for a in c.command or []]
        args = [environment.expand(a, env) for a in c.args or []]
        mounts = environment.container_mounts(c, vol_paths)
        mounts.append(runtime.Mount(source=str(self._pod.hosts_path()), target="/etc/hosts"))
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
        if self._svc.nri_plugins:
            env, devices, mounts = await self._nri_adjust(c.name, env, devices, mounts)
        argv = self._svc.images.command(c.image or "", command, args)
        env = self._svc.images.environment(env, c.image or "")
        spec = self._pod.pod.spec
        assert spec is not None
        hostname = "" if spec.hostNetwork else (spec.hostname or self._pod.name)
        image_root = self._svc.images.image_root(c.image or "")
        return runtime.ContainerConfig(
            image_root=str(image_root) if image_root is not None else "",
            argv=tuple(argv),
            env=env,
            workdir=c.workingDir or "",
            hostname=hostname[:63],
            address=self._pod.ip,
            mounts=tuple(mounts),
            devices=tuple(devices),
        )

    async def _nri_adjust(
        self,
        container: str,
        env: dict[str, str],
        devices: list[runtime.DeviceNode],
        mounts: list[runtime.Mount],
    ) -> tuple[dict[str, str], list[runtime.DeviceNode], list[runtime.Mount]]:
        """The runtime's CreateContainer step after CDI: the pod's network-namespace view at
        ``/sys/class/net``, then each NRI plugin's adjustment (a device or mount at a path
        already given replaces it, as NRI adjustments apply to the OCI spec)."""
        sandbox = self._pod.sandbox()
        env, devices, mounts = dict(env), list(devices), list(mounts)
        if sandbox.netns is not None:
            mounts.append(
                runtime.Mount(source=str(sandbox.netns), target=nri.SYS_CLASS_NET, readonly=True)
            )
        for plugin in self._svc.nri_plugins:
            try:
                adj = await plugin.create_container(sandbox, container)
            except nri.NriError as err:
                raise errors.CreateError(
                    f"failed to create containerd container: NRI plugin {plugin.name} "
                    f"failed CreateContainer: {err}"
                ) from err
            env.update(adj.env)
            paths = {d.path for d in adj.devices}
            devices = [d for d in devices if d.path not in paths] + adj.devices
            targets = {m.target for m in adj.mounts}
            mounts = [m for m in mounts if m.target not in targets] + adj.mounts
        return env, devices, mounts

    def _should_restart(self, rec: podstatus.ContainerRecord, rc: int) -> bool:
        spec = self._pod.pod.spec
        assert spec is not None
        policy = spec.restartPolicy or "Always"
        if rec.init:
            return rc != 0 and policy != "Never"
        return policy == "Always" or (policy == "OnFailure" and rc != 0)

    async def loop(
        self,
        c: Any,
        rec: podstatus.ContainerRecord,
        ctx: environment.PodContext,
        vol_paths: dict[str, str],
        claims: Claims,
    ) -> int:
        """Run container ``c`` until it ends for good; its last exit code."""
        delay = self._svc.settings.restart_backoff_s
        while True:
            try:
                cfg = await self._config(c, ctx, vol_paths, claims)
            except (environment.EnvError, images.ImageError, errors.CreateError) as err:
                reason = {
                    environment.EnvError: "CreateContainerConfigError",
                    images.ImageError: "ErrImagePull",
                    errors.CreateError: "CreateContainerError",
                }[type(err)]
                if rec.reason != reason or rec.message != str(err):
                    rec.wait(reason, str(err))
                    self._pod.changed()
                    await self._svc.recorder.pod(
                        self._pod.pod, "Warning", "Failed", f"Error: {err}"
                    )
                await asyncio.sleep(delay)
                continue
            rc = await self._run_once(c, rec, cfg)
            rec.will_restart = self._should_restart(rec, rc) and not self._stop.is_set()
            self._pod.changed()
            if not rec.will_restart:
                return rc
            rec.restart_count += 1
            msg = f"back-off {delay:.0f}s restarting failed container={c.name} pod={self._pod.name}"
            rec.wait("CrashLoopBackOff", msg)
            self._pod.changed()
            await self._svc.recorder.pod(
                self._pod.pod,
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {c.name} in pod {self._pod.name}",
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stop.wait()
            if self._stop.is_set():
                return rc
            delay = min(delay * 2, self._svc.settings.restart_backoff_cap_s)

    async def _run_once(
        self, c: Any, rec: podstatus.ContainerRecord, cfg: runtime.ContainerConfig
    ) -> int:
        if self._stop.is_set():
            return 143
        cid = self.cid(c.name)
        log_path = self._pod.container_log(c.name)
        # A runtime's start time, as a kubelet reports it: no later than the container's own
        # first instruction (a daemon's IMEX readiness signal counts only after it, imexsignal).
        launched = podstatus.now()
        running = await self._svc.runtime.start(cid, cfg, log_path)
        self.running[c.name] = running
        ended = asyncio.ensure_future(running.child.proc.wait())
        try:
            await asyncio.wait({ended}, timeout=self._svc.settings.relist_s)  # the relist
        except asyncio.CancelledError:
            running.child.kill()
            raise
        finally:
            ended.cancel()
        rec.state, rec.reason, rec.message = "running", "", ""
        rec.started_at = launched
        rec.container_id = f"sim://{cid}-{rec.restart_count}"
        rec.started = c.startupProbe is None
        rec.ready = c.readinessProbe is None and rec.started
        self._pod.changed()
        await self._svc.recorder.pod(
            self._pod.pod,
            "Normal",
            "Started",
            f"Started container {c.name}",
            f"spec.containers{{{c.name}}}",
        )
        prober = probes.Prober(
            self._svc.runtime, running, c, rec, self._pod.changed, self._log, pod_ip=self._pod.ip
        )
        probe_task = asyncio.create_task(prober.run(), name=f"probes:{self._pod.name}/{c.name}")
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
            self.running.pop(c.name, None)
        tail = running.child.log_tail(3) if rc == 127 else ""
        rec.terminate(rc, "StartError" if rc == 127 and "not found" in tail else None, tail)
        if prober.killed_reason:
            await self._svc.recorder.pod(self._pod.pod, "Normal", "Killing", prober.killed_reason)
        self._pod.changed()
        return rc

    async def kill_all(self, grace: float) -> None:
        """Stop every running container (SIGTERM, ``grace`` seconds, SIGKILL), each with its
        ``Killing`` event, as a kubelet stops a deleted pod's."""
        running = list(self.running.items())
        for name, _ in running:
            await self._svc.recorder.pod(
                self._pod.pod, "Normal", "Killing", f"Stopping container {name}"
            )
        await asyncio.gather(*(r.child.stop(grace) for _, r in running))
        self._ended(143)

    async def power_cut(self) -> None:
        """Every running container dies at once: SIGKILL with no SIGTERM before it, so no
        program runs its shutdown (no API write: an agent that unlabelled its pod on SIGTERM
        made a lost node look like a deleted pod), and no event is recorded (the API server
        may be gone already, as at sim teardown). An in-process program's task is cancelled
        (``containers.virtual``: a task has no stronger end)."""
        running = list(self.running.values())
        for r in running:
            r.child.kill()
        await asyncio.gather(*(r.child.proc.wait() for r in running), return_exceptions=True)
        self._ended(137)

    def _ended(self, exit_code: int) -> None:
        for rec in self._records:
            if rec.state == "running":
                rec.terminate(rec.exit_code or exit_code)
        with contextlib.suppress(Exception):
            self._pod.changed()
