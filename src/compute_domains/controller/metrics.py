"""Prometheus metrics of one controller instance, and the small HTTP server that exposes them.

Each ``Metrics`` owns its own ``CollectorRegistry`` (never the process-global default), so
several controllers in one process (tests, the simulator) do not collide.

Exposed:
- ``nvidia_dra_compute_domain_info{status}``: ComputeDomains by ``status.status`` (upstream's
  name, so existing dashboards keep working), read from the leader's cache at scrape time;
  ``status="Unknown"`` counts CDs whose status was never written;
- ``compute_domains_controller_reconcile_duration_seconds{outcome}`` and
  ``compute_domains_controller_reconcile_errors_total{kind}``;
- ``compute_domains_controller_api_requests_total{verb,resource,code}``;
- ``compute_domains_controller_status_writes_total``, ``..._leader`` (1 while leading) and
  ``..._workqueue_depth``.

The server answers ``GET /metrics``, ``/healthz`` and ``/readyz`` (HTTP/1.0, one request per
connection) on the loop, without threads.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

StatusCounts = Callable[[], Mapping[str, int]]


class _CdStatusCollector(Collector):
    """Reads CD counts by status from whatever source is bound (the leader's cache)."""

    def __init__(self) -> None:
        self.source: StatusCounts | None = None

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "nvidia_dra_compute_domain_info",
            "Number of ComputeDomains by their published status.status.",
            labels=["status"],
        )
        counts: Mapping[str, int] = self.source() if self.source is not None else {}
        for status in sorted({"Ready", "NotReady", *counts}):
            family.add_metric([status], counts.get(status, 0))
        yield family


class Metrics:
    """The collectors of one controller instance."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._cd_status = _CdStatusCollector()
        self.registry.register(self._cd_status)
        self.reconcile_seconds = Histogram(
            "compute_domains_controller_reconcile_duration_seconds",
            "Time one ComputeDomain reconcile took.",
            ["outcome"],
            registry=self.registry,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        )
        self.reconcile_errors = Counter(
            "compute_domains_controller_reconcile_errors",
            "Failed reconciles by error kind (temporary, permanent, unexpected).",
            ["kind"],
            registry=self.registry,
        )
        self.api_requests = Counter(
            "compute_domains_controller_api_requests",
            "Kubernetes API requests by verb, resource and HTTP status code.",
            ["verb", "resource", "code"],
            registry=self.registry,
        )
        self.status_writes = Counter(
            "compute_domains_controller_status_writes",
            "Writes of a ComputeDomain's /status.",
            registry=self.registry,
        )
        self.leader = Gauge(
            "compute_domains_controller_leader",
            "1 while this instance leads (or runs without leader election), else 0.",
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "compute_domains_controller_workqueue_depth",
            "ComputeDomains waiting to be reconciled.",
            registry=self.registry,
        )

    def bind_cd_status(self, source: StatusCounts | None) -> None:
        """Set (or with None clear) where CD counts by status are read from at scrape time."""
        self._cd_status.source = source

    def api_call(self, verb: str, resource: str, code: int | str) -> None:
        """Count one API request."""
        self.api_requests.labels(verb=verb, resource=resource, code=str(code)).inc()

    def render(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)


def count_statuses(statuses: Iterable[str | None]) -> dict[str, int]:
    """Counts by status value; None (never written) counts as ``Unknown``."""
    return dict(collections.Counter(s or "Unknown" for s in statuses))
