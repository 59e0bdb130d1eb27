"""The kubelet's HTTPS endpoint of a simulated node, enough for ``kubectl logs`` and ``exec``.

Serves ``GET /containerLogs/<ns>/<pod>/<container>`` (with ``tailLines`` and ``follow``, which
ends with the container: ``kubelet.logfollow``; ``previous`` is ignored), ``/exec/...`` (SPDY
upgrade: ``kubelet.execserver``) and ``/healthz`` on the node's own address, with a serving
certificate from the sim's CA; only clients with a certificate of that CA (the API server's
kubelet client) are accepted, as the API server's ``--kubelet-certificate-authority`` expects.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from compute_domains.containers import runtime
from compute_domains.sim.kubelet import execserver, logfollow

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TlsFiles:
    """Serving certificate, key and the CA that signs allowed clients."""

    cert: Path
    key: Path
    ca: Path


class _PodView(Protocol):
    def container_log(self, name: str) -> Path: ...

    def running(self, name: str) -> runtime.Running | None: ...


def _response(status: str, body: bytes, ctype: str = "text/plain") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class KubeletApi:
    """``run()`` serves the endpoint until cancelled."""

    def __init__(
        self,
        address: str,
        port: int,
        tls: TlsFiles,
        lookup: Callable[[str, str], _PodView | None],
        rt: runtime.Runtime,
    ) -> None:
        self._addr = address
        self._port = port
        self._tls = tls
        self._lookup = lookup
        self._runtime = rt

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(self._tls.ca))
        ctx.load_cert_chain(str(self._tls.cert), str(self._tls.key))
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    async def run(self) -> None:
        """Serve until cancelled."""
        server = await asyncio.start_server(
            self._handle, self._addr, self._port, ssl=self._context()
        )
        async with server:
            await server.serve_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                request = await reader.readuntil(b"\r\n\r\n")
            line, *fields = request.decode(errors="replace").split("\r\n")
            method, target = line.split(" ")[:2]
            headers = [
                (name.strip().lower(), value.strip())
                for name, sep, value in (f.partition(":") for f in fields)
                if sep
            ]
            await self._serve(method, target, headers, reader, writer)
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(OSError):
                writer.close()
                await writer.wait_closed()

    async def _serve(
        self,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        url = urllib.parse.urlsplit(target)
        query = urllib.parse.parse_qs(url.query)
        parts = [p for p in url.path.split("/") if p]
        if url.path == "/healthz":
            writer.write(_response("200 OK", b"ok"))
        elif method == "GET" and len(parts) == 4 and parts[0] == "containerLogs":
            await self._logs(parts[1], parts[2], parts[3], query, reader, writer)
        elif method in ("GET", "POST") and len(parts) in (4, 5) and parts[0] == "exec":
            # /exec/<ns>/<pod>/<container>, or with the pod's UID before the container
            await self._exec(parts[1], parts[2], parts[-1], query, headers, reader, writer)
        else:
            writer.write(_response("404 Not Found", b"not found"))

    async def _exec(
        self,
        ns: str,
        pod: str,
        container: str,
        query: dict[str, list[str]],
        headers: list[tuple[str, str]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        worker = self._lookup(ns, pod)
        running = worker.running(container) if worker is not None else None
        upgrade = next((v for k, v in headers if k == "upgrade"), "")
        offered = [
            p.strip() for k, v in headers if k == "x-stream-protocol-version" for p in v.split(",")
        ]
        try:
            if running is None:
                raise execserver.RequestError(
                    "404 Not Found", f"container not found ({container!r})"
                )
            opts = execserver.ExecOptions.from_query(query)
            if upgrade.lower() != "spdy/3.1":
                raise execserver.RequestError(
                    "400 Bad Request", f"unable to upgrade: upgrade {upgrade!r} is not SPDY/3.1"
                )
            protocol = execserver.negotiate(offered)
        except execserver.RequestError as err:
            writer.write(_response(err.status, str(err).encode()))
            return
        await execserver.serve(reader, writer, opts, protocol, running, self._runtime)

    async def _logs(
        self,
        ns: str,
        pod: str,
        container: str,
        query: dict[str, list[str]],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        worker = self._lookup(ns, pod)
        path = worker.container_log(container) if worker is not None else None
        if path is None or not path.exists():
            writer.write(
                _response(
                    "404 Not Found",
                    f"container {container} of pod {ns}/{pod} has no log on this node".encode(),
                )
            )
            return
        data = raw = path.read_bytes()
        tail = query.get("tailLines", [""])[0]
        if tail.isdigit():
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(tail) :]) if int(tail) else b""
        if query.get("follow", ["false"])[0] != "true":
            writer.write(_response("200 OK", data))
            return
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
        writer.write(data)
        await writer.drain()

        async def send(chunk: bytes) -> None:
            writer.write(chunk)
            await writer.drain()

        running = worker.running(container) if worker is not None else None
        ended = running.child.proc.wait() if running is not None else None
        await logfollow.follow(path, len(raw), send, ended, reader.read(1))
