"""Run a real Kubernetes control plane (etcd, kube-apiserver, scheduler, controller-manager).

The binaries are the pinned upstream builds from ``sim.toolchain``. Everything listens on
free loopback ports, so several control planes run side by side; certificates, keys and
kubeconfigs are generated into the sim's own folder (``pki.ControlPlanePki``); each component
runs with the command line ``components`` gives it and logs to its own file.
``ControlPlane.run()`` starts the components in dependency order, waits for each one's health
endpoint (``componentstart``: ports, health, why a start failed; a port another process took
first means starting again on fresh ports), publishes the endpoints (``endpoints.json``,
``state.Endpoints``), and then watches them: a component that dies ends the run with its
log tail (``restart`` and ``pause`` are fault drills that take one down, or freeze it, on
purpose: ``sim.drills``, ``cdctl sim control-plane``).
Cancellation stops them in reverse order (SIGTERM, bounded wait, SIGKILL).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from compute_domains.containers import procs
from compute_domains.sim import components, componentstart, drills, errors, pki, state

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ControlPlaneSettings:
    """How to run one control plane."""

    state_dir: Path
    """Folder for certificates, kubeconfigs, etcd data and logs (owned by this sim)."""
    bin_dir: Path
    """Folder with the built etcd, kube-apiserver, kube-scheduler, kube-controller-manager."""
    api_port: int | None = None
    """Fixed API server port; None picks a free loopback port."""
    node_monitor_grace_s: int = 8
    """Seconds without a heartbeat before a node turns NotReady (upstream default 40)."""
    eviction_toleration_s: int = 10
    """Default toleration of not-ready/unreachable taints before eviction (upstream 300)."""
    start_timeout_s: float = 120.0
    """How long a component may take to turn healthy before start-up fails."""
    verbosity: int = 1
    """Log verbosity passed to the Kubernetes components (``-v``)."""


PORT_ATTEMPTS = 3
"""Starts of the control plane when a component finds its chosen port taken."""


class ControlPlane:
    """One control plane; ``run()`` serves until cancelled, ``ready`` is set when healthy."""

    def __init__(self, settings: ControlPlaneSettings) -> None:
        self._s = settings
        self._children: list[procs.Child] = []
        self._launch: dict[str, tuple[list[str], str, Path | None]] = {}
        self._restarting: set[str] = set()
        self._paused: set[str] = set()
        self._changed = asyncio.Event()
        self.ready = asyncio.Event()
        self.endpoints: state.Endpoints | None = None

    @property
    def _logs(self) -> Path:
        return self._s.state_dir / "logs"

    async def run(self) -> None:
        """Start everything, wait for health, then serve until cancelled or a component dies."""
        try:
            await self._start_all()
            self.ready.set()
            logger.info("control plane ready at %s", self.endpoints and self.endpoints.api_server)
            await self._watch_children()
        finally:
            await self._stop_all()

    async def _start_all(self) -> None:
        # ``componentstart.free_port`` finds a port nobody holds *now*; another process may bind
        # it before our component does (seen once in six CI runs: kube-apiserver "address already
        # in use"). Such a start is not a fault of the sim: stop what started and start again on
        # ports chosen afresh. A port the settings name is never changed
        # (``componentstart.check_port_free``).
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                await self._start_all_once()
                return
            except componentstart.PortTaken as err:
                if attempt == PORT_ATTEMPTS:
                    raise errors.SimError(
                        f"{err}; gave up after {PORT_ATTEMPTS} starts on fresh ports"
                    ) from err
                logger.warning("%s; starting the control plane again on other ports", err)
                await self._stop_all()
                self._launch.clear()

    async def _start_all_once(self) -> None:
        s = self._s
        s.state_dir.mkdir(parents=True, exist_ok=True)
        tls = pki.ControlPlanePki(s.state_dir / "pki")
        if not (tls.dir / "ca.crt").exists():
            await asyncio.to_thread(tls.generate)
        if s.api_port is not None:
            componentstart.check_port_free(s.api_port)
        api_port = s.api_port or componentstart.free_port()
        etcd_port, etcd_peer = componentstart.free_port(), componentstart.free_port()
        server = f"https://127.0.0.1:{api_port}"
        kc_dir = s.state_dir / "kubeconfig"
        kc_dir.mkdir(exist_ok=True)
        admin = await asyncio.to_thread(
            tls.client_kubeconfig, server, "admin", ("system:masters",), kc_dir / "admin.yaml"
        )
        kcm = await asyncio.to_thread(
            tls.client_kubeconfig,
            server,
            "system:kube-controller-manager",
            (),
            kc_dir / "controller-manager.yaml",
        )
        sched = await asyncio.to_thread(
            tls.client_kubeconfig, server, "system:kube-scheduler", (), kc_dir / "scheduler.yaml"
        )

        etcd_url = f"http://127.0.0.1:{etcd_port}"
        await self._start(
            "etcd", components.etcd_argv(s, etcd_url, etcd_peer), health=f"{etcd_url}/health"
        )
        await self._start(
            "kube-apiserver",
            components.apiserver_argv(s, api_port, etcd_url, tls.dir),
            health=f"{server}/readyz",
            ca=tls.dir / "ca.crt",
        )
        kcm_port, sched_port = componentstart.free_port(), componentstart.free_port()
        await asyncio.gather(
            self._start(
                "kube-controller-manager",
                components.controller_manager_argv(s, kcm_port, kcm, tls.dir),
                health=f"https://127.0.0.1:{kcm_port}/healthz",
            ),
            self._start(
                "kube-scheduler",
                components.scheduler_argv(s, sched_port, sched),
                health=f"https://127.0.0.1:{sched_port}/healthz",
            ),
        )
        self.endpoints = state.Endpoints(
            api_server=server,
            etcd=etcd_url,
            admin_kubeconfig=str(admin),
            ca_file=str(tls.dir / "ca.crt"),
            pids={c.name: c.pid for c in self._children},
            metrics={
                "kube-controller-manager": f"https://127.0.0.1:{kcm_port}/metrics",
                "kube-scheduler": f"https://127.0.0.1:{sched_port}/metrics",
            },
        )
        (s.state_dir / "endpoints.json").write_text(self.endpoints.to_json())

    async def _start(
        self, name: str, argv: Sequence[str], *, health: str, ca: Path | None = None
    ) -> None:
        self._launch[name] = (list(argv), health, ca)
        log_path = self._logs / f"{name}.log"
        # Logs are appended across starts: only this start's lines tell why it failed.
        offset = log_path.stat().st_size if log_path.exists() else 0
        child = await procs.start(name, argv, log_path=log_path)
        self._children.append(child)
        await self._wait_healthy(child, health, ca, log_from=offset)

    def _child(self, name: str) -> procs.Child:
        name = drills.component(name)
        child = next((c for c in self._children if c.name == name), None)
        if child is None or name not in self._launch:
            raise errors.SimError(f"no component {name!r} runs in this control plane")
        if name in self._restarting:
            raise errors.SimError(f"{name} is being restarted by another drill")
        if name in self._paused:
            raise errors.SimError(f"{name} is paused by another drill")
        return child

    async def restart(
        self, name: str, *, down_s: float = 0.0, kill: bool = False
    ) -> drills.Restarted:
        """Stop one component, keep it down ``down_s`` seconds, start it again and wait healthy.

        A fault drill (``cdctl sim control-plane restart``; the API server restarting while a
        controller reconciles): the same arguments, ports and certificates are reused, etcd
        keeps its data, and the run does not end because the component exited on purpose.
        ``kill`` ends it with SIGKILL (a crash: no graceful shutdown, connections reset)
        instead of SIGTERM. ``endpoints.json`` gets the new pid.
        """
        old = self._child(name)
        argv, health, ca = self._launch[old.name]
        self._restarting.add(old.name)
        try:
            t0 = time.monotonic()
            if kill:
                old.kill()
                await old.proc.wait()
            else:
                await old.stop()
            self._children.remove(old)
            if down_s:
                await asyncio.sleep(down_s)
            child = await procs.start(old.name, argv, log_path=self._logs / f"{old.name}.log")
            self._children.append(child)
            self._publish()
            await self._wait_healthy(child, health, ca)
            down = time.monotonic() - t0
            logger.info("%s restarted (pid %d), down %.1fs", old.name, child.pid, down)
        finally:
            self._restarting.discard(old.name)
            self._changed.set()
        return drills.Restarted(
            component=old.name,
            down_s=down,
            old_pid=old.pid,
            pid=child.pid,
            signal="SIGKILL" if kill else "SIGTERM",
        )

    async def pause(
        self, name: str, seconds: float, *, resume: asyncio.Event | None = None
    ) -> float:
        """Freeze one component (SIGSTOP) for ``seconds``, or until ``resume`` is set, then
        let it go on (SIGCONT, also when this is cancelled); returns how long it was stopped.

        A fault drill (``cdctl sim control-plane pause etcd``): a stopped process keeps its
        sockets open and answers nothing, as a store stuck on a slow disk or a starved host.
        """
        child = self._child(name)
        seconds = drills.check_pause(seconds)
        self._paused.add(child.name)
        logger.info("%s paused (SIGSTOP, pid %d) for up to %.1fs", child.name, child.pid, seconds)
        try:
            held = await drills.hold_stopped(child.pid, seconds, resume)
        finally:
            self._paused.discard(child.name)
        logger.info("%s continued (SIGCONT) after %.1fs", child.name, held)
        return held

    def _publish(self) -> None:
        """Record the components' current pids in ``endpoints.json`` (``cdctl sim status``,
        and the stale-folder cleanup, which kills recorded pids)."""
        if self.endpoints is None:
            return
        pids = {c.name: c.pid for c in self._children}
        self.endpoints = dataclasses.replace(self.endpoints, pids=pids)
        (self._s.state_dir / "endpoints.json").write_text(self.endpoints.to_json())

    async def _wait_healthy(
        self, child: procs.Child, url: str, ca: Path | None, *, log_from: int | None = None
    ) -> None:
        """Until ``url`` answers 200 (``componentstart.wait_healthy``: a child that exits
        first fails the start, with ``PortTaken`` when its port was taken)."""
        await componentstart.wait_healthy(
            child, url, ca, timeout_s=self._s.start_timeout_s, log_from=log_from
        )
        logger.info("%s healthy (pid %d)", child.name, child.pid)

    async def _watch_children(self) -> None:
        while True:
            self._changed.clear()
            waits = {asyncio.ensure_future(c.proc.wait()): c for c in self._children}
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                done, _ = await asyncio.wait([*waits, changed], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for fut in [*waits, changed]:
                    fut.cancel()
            dead = [waits[f] for f in done if f in waits and waits[f].name not in self._restarting]
            if dead:
                raise errors.SimError(componentstart.died_message(dead[0]))
            if not self._restarting or changed in done:
                continue
            # A component is being restarted on purpose: wait until that is over.
            await self._changed.wait()

    async def _stop_all(self) -> None:
        for child in reversed(self._children):
            if child.name in self._paused:
                # A drill's pause ends with the sim: a stopped process would sit out the
                # SIGTERM grace (its drill's own SIGCONT comes when that task is cancelled).
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGCONT)
            rc = await child.stop()
            logger.info("%s stopped (exit %d)", child.name, rc)
        self._children.clear()
