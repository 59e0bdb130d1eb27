"""The HTTP endpoint every component serves: ``/metrics`` in the Prometheus text format and its
health paths, on a bare asyncio server (no web framework for three GET routes).

What is measured is each component's own business (its registry and ``render``); this module
only answers scrapers and probes, and never lets a bad client disturb the component.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping

logger = logging.getLogger(__name__)

Check = Callable[[], Awaitable[bool]]


async def always_ok() -> bool:
    """A health path that answers as long as the process serves at all."""
    return True


class HttpEndpoint:
    """Serves ``GET /metrics`` and one path per health check until cancelled.

    A check that returns False answers 503; anything else 404 (unknown path) or 405 (not GET).
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        render: Callable[[], bytes],
        checks: Mapping[str, Check],
    ) -> None:
        self._host = host or None
        self._port = port
        self._render = render
        self._checks = dict(checks)
        self.port: int | None = None
        """The port actually bound (useful with port 0 in tests); None before ``run``."""
        self.started = asyncio.Event()

    async def run(self) -> None:
        """Bind and serve until cancelled."""
        server = await asyncio.start_server(self._serve, self._host, self._port)
        self.port = server.sockets[0].getsockname()[1]
        logger.info("serving metrics on %s:%s", self._host or "*", self.port)
        self.started.set()
        async with server:
            await server.serve_forever()

    async def _answer(self, request: bytes) -> tuple[str, str, bytes]:
        parts = request.decode("latin-1").split()
        path = parts[1].split("?", 1)[0] if len(parts) >= 2 else ""
        if len(parts) < 2 or parts[0] != "GET":
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        if path == "/metrics":
            # Imported at the first scrape: a probe-only process (a daemon) never pays for it.
            from prometheus_client.exposition import CONTENT_TYPE_LATEST

            return "200 OK", CONTENT_TYPE_LATEST, self._render()
        check = self._checks.get(path)
        if check is None:
            return "404 Not Found", "text/plain", b"not found\n"
        if await check():
            return "200 OK", "text/plain", b"ok\n"
        return "503 Service Unavailable", "text/plain", b"unhealthy\n"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10.0):
                request = await reader.readline()
            while True:  # headers are not needed
                async with asyncio.timeout(10.0):
                    if not (await reader.readline()).strip():
                        break
            status, ctype, body = await self._answer(request)
            head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
            head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            writer.write(head.encode("latin-1") + body)
            await writer.drain()
        except (OSError, TimeoutError, UnicodeDecodeError) as err:
            # A scraper that hangs up or sends garbage must not disturb the component.
            logger.debug("metrics request failed: %s", err)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
