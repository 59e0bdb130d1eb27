"""Startup, readiness and liveness probes of one simulated container (exec, tcpSocket, httpGet).

Semantics follow the kubelet: the startup probe gates the others; readiness flips the
container's ``ready``; a liveness (or startup) probe that fails ``failureThreshold`` times in a
row kills the container (SIGTERM, grace, SIGKILL) so its restart policy applies. An exec
probe's command gets the kubelet's ``$(VAR)`` expansion from the container's static env
(``probe_command``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx2 as httpx

from compute_domains.containers import runtime
from compute_domains.sim.kubelet import environment, podstatus


def probe_command(container: Any, command: list[str]) -> list[str]:
    """An exec probe's command after the kubelet's ``$(VAR)`` expansion.

    The kubelet expands probe commands from the container's ``env`` as written
    (``ExpandContainerCommandOnlyStatic``), not from the resolved environment: each entry's
    literal ``value``, so an entry set by ``valueFrom`` expands to the empty string; ``$$`` is a
    literal ``$`` and unknown names stay as written.
    """
    static = {str(e.name): e.value or "" for e in container.env or []}
    return [environment.expand(arg, static) for arg in command]


class Prober:
    """Runs one container's probes until cancelled."""

    def __init__(
        self,
        rt: runtime.Runtime,
        running: runtime.Running,
        container: Any,
        rec: podstatus.ContainerRecord,
        changed: Callable[[], None],
        log: logging.LoggerAdapter[logging.Logger],
        *,
        pod_ip: str = "127.0.0.1",
    ) -> None:
        self._pod_ip = pod_ip
        self._rt = rt
        self._running = running
        self._c = container
        self._rec = rec
        self._changed = changed
        self._log = log
        self.killed_reason = ""
        self._http: httpx.AsyncClient | None = None
        """One client for this container's httpGet probes; without keep-alive, so each probe
        opens its own connection, as the kubelet's prober does (``DisableKeepAlives``). A client
        per probe cost an SSL context each time: 1,152 plugins probed every 2-10 s."""

    def _port(self, port: int | str) -> int:
        """A probe's port: a number, or the name of one of the container's ports."""
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in self._c.ports or []:
            if p.name == port:
                return int(p.containerPort)
        return 0

    async def _check(self, probe: Any) -> bool:
        timeout = float(probe.timeoutSeconds or 1)
        if probe.exec is not None:
            argv = probe_command(self._c, list(probe.exec.command or []))
            rc, out = await self._rt.exec(self._running, argv, max(timeout, 5.0))
            if rc != 0:
                self._log.debug("exec probe failed (%d): %s", rc, out.strip()[-200:])
            return rc == 0
        if probe.tcpSocket is not None:
            host = probe.tcpSocket.host or self._pod_ip
            try:
                _, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, self._port(probe.tcpSocket.port)), timeout
                )
            except (OSError, TimeoutError):
                return False
            writer.close()
            return True
        if probe.httpGet is not None:
            g = probe.httpGet
            url = (
                f"{(g.scheme or 'HTTP').lower()}://{g.host or self._pod_ip}:{self._port(g.port)}"
                f"{g.path or '/'}"
            )
            if self._http is None:
                self._http = httpx.AsyncClient(
                    verify=False, limits=httpx.Limits(max_keepalive_connections=0)
                )
            try:
                resp = await self._http.get(url, timeout=timeout)
            except httpx.HTTPError:
                return False
            return 200 <= resp.status_code < 400
        return True

    async def _loop(self, probe: Any, on_result: Callable[[bool], bool]) -> None:
        """Probe periodically; ``on_result`` returns False to end this loop."""
        await asyncio.sleep(float(probe.initialDelaySeconds or 0))
        period = float(probe.periodSeconds or 10)
        fails, successes = 0, 0
        while True:
            ok = await self._check(probe)
            fails, successes = (0, successes + 1) if ok else (fails + 1, 0)
            if ok and successes >= int(probe.successThreshold or 1):
                if not on_result(True):
                    return
            elif not ok and fails >= int(probe.failureThreshold or 3):
                if not on_result(False):
                    return
            await asyncio.sleep(period)

    async def _kill(self, reason: str) -> None:
        self.killed_reason = reason
        self._log.info("%s", reason)
        grace = 30.0
        await self._running.child.stop(grace)

    async def run(self) -> None:
        """Startup probe first, then readiness and liveness side by side."""
        try:
            await self._run()
        finally:
            if self._http is not None:
                await self._http.aclose()
                self._http = None

    async def _run(self) -> None:
        c = self._c
        if c.startupProbe is not None:
            outcome: list[bool] = []

            def startup(ok: bool) -> bool:
                outcome.append(ok)
                return False

            await self._loop(c.startupProbe, startup)
            if not outcome[0]:
                await self._kill(f"Container {c.name} failed startup probe, will be restarted")
                return
            self._rec.started = True
            self._rec.ready = c.readinessProbe is None
            self._changed()
        tasks = []
        if c.readinessProbe is not None:

            def readiness(ok: bool) -> bool:
                if self._rec.ready != ok:
                    self._rec.ready = ok
                    self._changed()
                return True

            tasks.append(self._loop(c.readinessProbe, readiness))
        if c.livenessProbe is not None:
            dead = asyncio.Event()

            def liveness(ok: bool) -> bool:
                if not ok:
                    dead.set()
                return ok

            async def watch_liveness() -> None:
                await self._loop(c.livenessProbe, liveness)
                if dead.is_set():
                    await self._kill(f"Container {c.name} failed liveness probe, will be restarted")

            tasks.append(watch_liveness())
        if tasks:
            await asyncio.gather(*tasks)
