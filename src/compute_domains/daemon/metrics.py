"""Prometheus metrics of one daemon instance (a registry of its own, never the global default).

Exposed on ``/metrics`` of the pod IP when ``DaemonSettings.metrics_port`` is set:

- ``compute_domains_daemon_clique_conflicts_total{verb}``: clique writes the API server refused
  with 409 because another daemon wrote the clique first (``verb``: ``create`` when it already
  existed, ``update`` when its resourceVersion moved on). Each is an expected race of the
  optimistic-concurrency protocol: the daemon re-reads and retries, and logs it at debug level
  only; a count that keeps rising with a stable membership is what to look at.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import generate_latest

CREATE = "create"
UPDATE = "update"


class DaemonMetrics:
    """The collectors of one daemon."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.clique_conflicts = Counter(
            "compute_domains_daemon_clique_conflicts",
            "Clique writes refused with 409 (another daemon wrote first); retried on a re-read.",
            ["verb"],
            registry=self.registry,
        )
        for verb in (CREATE, UPDATE):
            self.clique_conflicts.labels(verb=verb)  # both series exist from the start, at 0

    def render(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)
