"""Prometheus metrics of one daemon instance (a registry of its own, never the global default).

Exposed on ``/metrics`` of the pod IP (``DaemonSettings.metrics_port``):

- ``compute_domains_daemon_clique_conflicts_total{verb}``: clique writes the API server refused
  with 409 because another daemon wrote the clique first (``verb``: ``create`` when it already
  existed, ``update`` when its resourceVersion moved on). Each is an expected race of the
  optimistic-concurrency protocol: the daemon re-reads and retries, and logs it at debug level
  only; a count that keeps rising with a stable membership is what to look at.
- ``compute_domains_daemon_startup_step_seconds{step}``: seconds from the process start until
  each start-up step was done (``daemon.steps``; a gauge set once per step and process).
- ``compute_domains_daemon_imex_checks_total{result}``: the daemon's own IMEX checks
  (``nvidia-imex-ctl -q``, ``daemon.health``), ``result`` ``ready`` or ``not_ready``.
- ``compute_domains_daemon_imex_ready``: 1 while the latest own check saw ``READY``, else 0.

The instance is built once by the CLI (or the ``Daemon``) and handed to whoever counts.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import generate_latest

CREATE = "create"
UPDATE = "update"
PREFIX = "compute_domains_daemon"


class DaemonMetrics:
    """The collectors of one daemon."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.clique_conflicts = Counter(
            f"{PREFIX}_clique_conflicts",
            "Clique writes refused with 409 (another daemon wrote first); retried on a re-read.",
            ["verb"],
            registry=self.registry,
        )
        for verb in (CREATE, UPDATE):
            self.clique_conflicts.labels(verb=verb)  # both series exist from the start, at 0
        self.startup_step = Gauge(
            f"{PREFIX}_startup_step_seconds",
            "Seconds from the process start until the start-up step was done.",
            ["step"],
            registry=self.registry,
        )
        self.imex_checks = Counter(
            f"{PREFIX}_imex_checks",
            "The daemon's own IMEX checks (nvidia-imex-ctl -q), by result.",
            ["result"],
            registry=self.registry,
        )
        for result in ("ready", "not_ready"):
            self.imex_checks.labels(result=result)
        self.imex_ready = Gauge(
            f"{PREFIX}_imex_ready",
            "1 while the daemon's latest own IMEX check saw READY, else 0.",
            registry=self.registry,
        )

    def step(self, step: str, seconds: float) -> None:
        """A start-up step was done ``seconds`` after the process started."""
        self.startup_step.labels(step=step).set(seconds)

    def imex_check(self, ok: bool) -> None:
        """One own IMEX check ended."""
        self.imex_checks.labels(result="ready" if ok else "not_ready").inc()
        self.imex_ready.set(1 if ok else 0)

    def render(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)
