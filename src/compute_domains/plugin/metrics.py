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

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from compute_domains.api import names
from compute_domains.plugin import checkpoint

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
