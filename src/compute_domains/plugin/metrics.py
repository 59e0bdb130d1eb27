"""The plugin's Prometheus metrics (a registry per instance) and its small HTTP endpoint.

Series keep upstream's names, so existing dashboards work:
- ``nvidia_dra_requests_total{driver,operation}``: claims prepared/unprepared successfully.
- ``nvidia_dra_request_duration_seconds{driver,operation}``: duration of successful attempts
  (lock wait and readiness wait included).
- ``nvidia_dra_requests_inflight{driver,operation}``: attempts running now.
- ``nvidia_dra_node_prepare_errors_total{driver,error_type}`` and
  ``nvidia_dra_node_unprepare_errors_total{driver,error_type}``: failed attempts, retries
  included; ``error_type`` is ``lock_acquire``, ``prepare_devices``/``unprepare_devices``
  (retryable) or ``permanent``.
- ``nvidia_dra_prepared_devices{node,driver,device_type}``: devices of completed claims.
The request series are created at zero, as upstream does. The endpoint serves ``/metrics`` and
``/healthz`` (200 when the plugin's own gRPC sockets answer, else 503) and nothing else; it is
an asyncio server, so it needs no thread of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from compute_domains.api import names
from compute_domains.plugin import checkpoint
from compute_domains.plugin.config import MetricsSettings

logger = logging.getLogger(__name__)

PREPARE = "prepare"
UNPREPARE = "unprepare"
_BUCKETS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8)
_DEVICE_TYPES = ("channel", "daemon", "unknown")


class PluginMetrics:
    """The metric families of one plugin instance, in their own registry."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.registry = CollectorRegistry(auto_describe=True)
        driver = ("driver", "operation")
        self.requests = Counter(
            "nvidia_dra_requests", "Claims handled successfully.", driver, registry=self.registry
        )
        self.duration = Histogram(
            "nvidia_dra_request_duration_seconds",
            "Duration of successful prepare/unprepare attempts.",
            driver,
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.inflight = Gauge(
            "nvidia_dra_requests_inflight", "Attempts in progress.", driver, registry=self.registry
        )
        self.prepare_errors = Counter(
            "nvidia_dra_node_prepare_errors",
            "Failed prepare attempts.",
            ("driver", "error_type"),
            registry=self.registry,
        )
        self.unprepare_errors = Counter(
            "nvidia_dra_node_unprepare_errors",
            "Failed unprepare attempts.",
            ("driver", "error_type"),
            registry=self.registry,
        )
        self.prepared_devices = Gauge(
            "nvidia_dra_prepared_devices",
            "Devices of completed claims on this node.",
            ("node", "driver", "device_type"),
            registry=self.registry,
        )
        for op in (PREPARE, UNPREPARE):
            self.requests.labels(names.DRIVER_NAME, op)
            self.duration.labels(names.DRIVER_NAME, op)
            self.inflight.labels(names.DRIVER_NAME, op)
        self.observe_checkpoint(checkpoint.Checkpoint())

    def error(self, operation: str, error_type: str) -> None:
        """Count one failed attempt."""
        family = self.prepare_errors if operation == PREPARE else self.unprepare_errors
        family.labels(names.DRIVER_NAME, error_type).inc()

    def observe_checkpoint(self, cp: checkpoint.Checkpoint) -> None:
        """Recompute the prepared-devices gauge from a checkpoint just read or written."""
        counts = dict.fromkeys(_DEVICE_TYPES, 0)
        for entry in cp.claims.values():
            if entry.state is checkpoint.ClaimState.PREPARE_COMPLETED:
                for device in entry.devices:
                    kind = device.kind if device.kind in counts else "unknown"
                    counts[kind] += 1
        for kind, count in counts.items():
            self.prepared_devices.labels(self.node, names.DRIVER_NAME, kind).set(count)

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


class HttpEndpoint:
    """Serves ``/metrics`` and ``/healthz`` until cancelled."""

    def __init__(
        self,
        settings: MetricsSettings,
        metrics: PluginMetrics,
        healthy: Callable[[], Awaitable[bool]],
    ) -> None:
        self._s = settings
        self._metrics = metrics
        self._healthy = healthy
        self.port: int | None = None
        """The bound port once serving (useful with port 0)."""

    async def run(self) -> None:
        """Listen and serve; returns only by cancellation."""
        assert self._s.port is not None
        server = await asyncio.start_server(self._serve, self._s.bind_address, self._s.port)
        self.port = server.sockets[0].getsockname()[1]
        logger.info("serving metrics on %s:%s", self._s.bind_address, self.port)
        async with server:
            await server.serve_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 10.0)
            while (await asyncio.wait_for(reader.readline(), 10.0)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else ""
            if parts[:1] != ["GET"]:
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET only\n"
            elif path == "/metrics":
                status, ctype, body = "200 OK", CONTENT_TYPE_LATEST, self._metrics.render()
            elif path == "/healthz":
                ok = await self._healthy()
                status = "200 OK" if ok else "503 Service Unavailable"
                ctype, body = "text/plain", b"ok\n" if ok else b"unhealthy\n"
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
            head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError) as err:  # a client that went away: nothing to do
            logger.debug("metrics client dropped: %s", err)
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
