"""Startup, readiness and liveness probes of one simulated container (exec, tcpSocket, httpGet).

Semantics follow the kubelet: the startup probe gates the others; readiness flips the
container's ``ready``; a liveness (or startup) probe that fails ``failureThreshold`` times in a
row kills the container (SIGTERM, grace, SIGKILL) so its restart policy applies. An exec
probe's command gets the kubelet's ``$(VAR)`` expansion from the container's static env
(``probe_command``).
"""

from __future__ import annotations

import asyncio
import contextlib
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


async def http_get_status(
    host: str, port: int, path: str, headers: list[tuple[str, str]], timeout: float
) -> int | None:
    """The status code of one plain-HTTP ``GET`` on a connection of its own, closed after the
    answer, as the kubelet's prober sends it (``User-Agent: kube-probe/<version>``, keep-alive
    off); None when there is no answer within ``timeout``. A bare request on a stream, not an
    HTTP client: at 1,152 nodes the probes were a third of an idle sim's CPU through httpx."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}"]
    names = {name.lower() for name, _ in headers}
    lines += [f"{n}: {v}" for n, v in headers]
    if "user-agent" not in names:
        lines.append(f"User-Agent: kube-probe/{PROBE_VERSION}")
    if "accept" not in names:
        lines.append("Accept: */*")
    lines.append("Connection: close")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            status = await reader.readline()
            length = None
            while (line := await reader.readline()).strip():
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length" and value.strip().isdigit():
                    length = int(value.strip())
            # The kubelet reads (up to 10 KiB of) the body before it closes; so does this, to
            # the end of the body when its length is given, else to the server's close.
            if length is None:
                await reader.read(10240)
            else:
                with contextlib.suppress(asyncio.IncompleteReadError):
                    await reader.readexactly(min(length, 10240))
    except (OSError, TimeoutError, ValueError):
        return None
    finally:
        if writer is not None:
            writer.close()
    parts = status.split(maxsplit=2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return None
    return int(parts[1])


PROBE_VERSION = "1.34"
"""The Kubernetes minor version the probes' User-Agent names (the kubelet's own)."""


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
        """One client for this container's HTTPS probes; without keep-alive, so each probe
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
                async with asyncio.timeout(timeout):
                    _, writer = await asyncio.open_connection(
                        host, self._port(probe.tcpSocket.port)
                    )
            except (OSError, TimeoutError):
                return False
            writer.close()
            return True
        if probe.httpGet is not None:
            g = probe.httpGet
            host, port, path = g.host or self._pod_ip, self._port(g.port), g.path or "/"
            headers = [(str(h.name), str(h.value)) for h in g.httpHeaders or []]
            if (g.scheme or "HTTP").upper() == "HTTP":
                code = await http_get_status(host, port, path, headers, timeout)
                return code is not None and 200 <= code < 400
            if self._http is None:
                self._http = httpx.AsyncClient(
                    verify=False, limits=httpx.Limits(max_keepalive_connections=0)
                )
            try:
                resp = await self._http.get(
                    f"https://{host}:{port}{path}", headers=headers, timeout=timeout
                )
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
