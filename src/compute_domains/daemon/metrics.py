"""Prometheus metrics of one daemon instance (a registry of its own, never the global default).

Exposed on ``/metrics`` of the pod IP (``DaemonSettings.metrics_port``):

- ``compute_domains_daemon_clique_conflicts_total{verb}``: clique writes of this daemon that
  the API server refused because the clique had changed under them. Since the controller
  assigns the indices (docs/decisions/0009) the daemon's only writes are guarded JSON patches
  of its own entry (``verb="patch"``), which fail only when that entry moved or was taken over
  (or the clique is gone); expected to stay 0 in a formation. ``create`` and ``update`` (the
  earlier daemon-side join, which raced by design) stay exported at 0 for dashboards.
- ``compute_domains_daemon_startup_step_seconds{step}``: seconds from the process start until
  each start-up step was done (``daemon.steps``; a gauge set once per step and process).
- ``compute_domains_daemon_imex_checks_total{result}``: the daemon's own IMEX checks
  (``nvidia-imex-ctl -q``, ``daemon.health``), ``result`` ``ready`` or ``not_ready``.
- ``compute_domains_daemon_imex_ready``: 1 while the latest own check saw ``READY``, else 0.

The instance is built once by the CLI (or the ``Daemon``) and handed to whoever counts. It
keeps its numbers in plain attributes and imports ``prometheus_client`` only when a scraper
first asks for ``/metrics`` (importing it costs every daemon start about 14 ms of CPU, and the
first Ready report needs none of it).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

CREATE = "create"
UPDATE = "update"
PATCH = "patch"
PREFIX = "compute_domains_daemon"


class DaemonMetrics:
    """The numbers of one daemon (see the module docstring)."""

    def __init__(self) -> None:
        self.clique_conflicts: dict[str, int] = {CREATE: 0, UPDATE: 0, PATCH: 0}
        """Refused clique writes by verb (every series exists from the start, at 0)."""
        self.startup_steps: dict[str, float] = {}
        """Start-up step → seconds after the process start."""
        self.imex_checks: dict[str, int] = {"ready": 0, "not_ready": 0}
        """Own IMEX checks by result."""
        self.imex_ready = 0
        """1 while the latest own IMEX check saw READY."""
        self._registry: Any = None

    def clique_conflict(self, verb: str) -> None:
        """A clique write was refused (``verb``: :data:`PATCH`; :data:`CREATE`, :data:`UPDATE`
        were the earlier join's)."""
        self.clique_conflicts[verb] = self.clique_conflicts.get(verb, 0) + 1

    def step(self, step: str, seconds: float) -> None:
        """A start-up step was done ``seconds`` after the process started."""
        self.startup_steps[step] = seconds

    def imex_check(self, ok: bool) -> None:
        """One own IMEX check ended."""
        key = "ready" if ok else "not_ready"
        self.imex_checks[key] += 1
        self.imex_ready = 1 if ok else 0

    def render(self) -> bytes:
        """The text exposition of every metric."""
        from prometheus_client.exposition import generate_latest

        if self._registry is None:
            from prometheus_client import CollectorRegistry

            self._registry = CollectorRegistry()
            self._registry.register(_Collector(self))
        data: bytes = generate_latest(self._registry)
        return data


class _Collector:
    """Hands the registry the current numbers at each scrape."""

    def __init__(self, metrics: DaemonMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        m = self._m
        yield _family(
            CounterMetricFamily,
            "clique_conflicts",
            "Clique writes refused because the clique changed under them; retried on a re-read.",
            "verb",
            m.clique_conflicts,
        )
        yield _family(
            GaugeMetricFamily,
            "startup_step_seconds",
            "Seconds from the process start until the start-up step was done.",
            "step",
            m.startup_steps,
        )
        yield _family(
            CounterMetricFamily,
            "imex_checks",
            "The daemon's own IMEX checks (nvidia-imex-ctl -q), by result.",
            "result",
            m.imex_checks,
        )
        yield GaugeMetricFamily(
            f"{PREFIX}_imex_ready",
            "1 while the daemon's latest own IMEX check saw READY, else 0.",
            value=m.imex_ready,
        )


def _family(kind: Any, name: str, doc: str, label: str, values: Mapping[str, float]) -> Any:
    """One labelled metric family (``kind``: a prometheus_client ``*MetricFamily`` class)."""
    family = kind(f"{PREFIX}_{name}", doc, labels=[label])
    for key, value in values.items():
        family.add_metric([key], value)
    return family
