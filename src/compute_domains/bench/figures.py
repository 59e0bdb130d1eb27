"""What the benchmark pictures show, taken from result documents: curve points and phase bars.

Pure functions over the plain data of ``bench/results/*.json`` (``bench.roundresults.document``);
``bench.draw`` turns their output into PNGs and adds nothing to it, so what a picture shows is
tested here, apart from the drawing.

- **Formation curve** (``lines``): per run and series (``observe.CURVES``: workload pods
  Running, clique entries Ready, daemon pods Ready), how many had got there at each moment since
  the apply: the k-th point is (the k-th earliest time, k). A run recorded before the per-pod
  times were (2026-12-06) has only its milestones: its line is one point, (the time every one
  had got there, all of them), and says it is ``partial``.
- **Phase bars** (``bars``): per driver or scope, the seconds after the apply at which every
  pod or entry had reached each stage (the milestones), median and min..max over the runs.

A *source* is one ``results[]`` entry of a document (one driver, one N) with the label the
pictures give it (``label``: the driver's name and, for ours, its IMEX shape).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

SERIES: tuple[tuple[str, str, str], ...] = (
    ("workloads_running", "workload pods Running", "workloads_running"),
    ("entries_ready", "clique entries Ready", "cliques"),
    ("daemons_ready", "daemon pods Ready", "daemons"),
)
"""(key in a run's ``curves``, what it counts, the milestone at which all of them had)."""

PHASES: tuple[tuple[str, str], ...] = (
    ("workloads_created", "workload pods created"),
    ("claims_created", "channel claims created"),
    ("claims_allocated", "channel claims allocated"),
    ("workloads_scheduled", "workload pods scheduled"),
    ("daemons_created", "daemon pods created"),
    ("daemons_scheduled", "daemon pods scheduled"),
    ("daemons_running", "daemon pods running"),
    ("cliques_registered", "clique entries registered"),
    ("daemons", "daemon pods Ready"),
    ("cliques", "clique entries Ready"),
    ("cd", "CD Ready"),
    ("workloads_running", "workload pods Running"),
)
"""The milestones a phase bar shows, in the order a formation passes them."""

Source = tuple[str, dict[str, Any]]
"""(label, one ``results[]`` entry of a result document)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Line:
    """One run's series on the formation curve."""

    label: str
    series: str
    """A key of ``SERIES``."""
    run: int
    """The run's place among its source's runs (0: the first)."""
    total: int
    """How many the series counts to: the pods, or the domain's nodes (entries, daemons)."""
    xs: tuple[float, ...]
    """Seconds after the apply, ascending."""
    ys: tuple[int, ...]
    """How many had got there by ``xs[i]``."""
    partial: bool
    """Only the milestone is known (an older result file): one point, all of them at once."""


@dataclasses.dataclass(frozen=True, slots=True)
class Bar:
    """One phase of one source: seconds after the apply at which every one had reached it."""

    label: str
    phase: str
    """A key of ``PHASES``."""
    median: float
    low: float
    high: float
    runs: int
    """How many runs reached the phase (the spread is over these)."""


def _scope(values: Sequence[str]) -> str:
    """Our chart's IMEX shape from the ``--set`` values a run gave it (chart defaults else)."""
    settings = dict(v.split("=", 1) for v in values if "=" in v)
    if settings.get("imex.agents") != "resident":
        return "per-CD DaemonSets"
    return (
        "resident, per clique"
        if settings.get("imex.scope") == "perClique"
        else ("resident, per domain")
    )


def label(doc: dict[str, Any], driver: str) -> str:
    """How the pictures name ``driver`` of ``doc``: ``ours (resident, per clique)``, ``nvidia``.

    A driver given our chart's IMEX values, or ours, gets its shape; another driver its name.
    """
    spec: dict[str, Any] = next((d for d in doc.get("drivers", []) if d.get("name") == driver), {})
    values = list(spec.get("values") or [])
    if driver != "ours" and not any(v.startswith("imex.") for v in values):
        return driver
    return f"{driver} ({_scope(values)})"


def sources(doc: dict[str, Any], n: int) -> list[Source]:
    """The document's results for ``n`` pods, each with its label, in the document's order."""
    return [(label(doc, r["driver"]), r) for r in doc.get("results", []) if r["n"] == n]


def sizes(doc: dict[str, Any]) -> list[int]:
    """Every N the document has results for, ascending."""
    return sorted({int(r["n"]) for r in doc.get("results", [])})


def steps(times: Sequence[float]) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The curve's points: each time, ascending, with how many had got there by then."""
    xs = tuple(sorted(times))
    return xs, tuple(range(1, len(xs) + 1))


def _total(series: str, run: dict[str, Any]) -> int:
    pods = int(run["n"])
    return pods if series == "workloads_running" else pods // int(run.get("pods_per_node", 1))


def _had_daemon_pods(run: dict[str, Any]) -> bool:
    """Whether the run had daemon pods at all (per clique it has none: its ``daemons``
    milestone is the shared registry's entries, already the ``entries_ready`` line)."""
    return bool((run.get("curves") or {}).get("daemons_ready")) or (
        "daemons_created" in (run.get("milestones") or {})
    )


def lines(found: Sequence[Source]) -> list[Line]:
    """Every run's formation-curve series of the sources (none for a series it cannot show)."""
    out = []
    for name, result in found:
        for index, run in enumerate(result.get("runs", [])):
            curves, marks = run.get("curves") or {}, run.get("milestones") or {}
            for series, _, milestone in SERIES:
                if series == "daemons_ready" and not _had_daemon_pods(run):
                    continue
                total = _total(series, run)
                if curves.get(series):
                    xs, ys = steps(curves[series])
                    out.append(Line(name, series, index, total, xs, ys, partial=False))
                elif not curves and milestone in marks:
                    out.append(
                        Line(name, series, index, total, (marks[milestone],), (total,), True)
                    )
    return out


def bars(found: Sequence[Source]) -> list[Bar]:
    """Every source's phases, in ``PHASES`` order, median and min..max over its runs."""
    out = []
    for name, result in found:
        runs = result.get("runs", [])
        for phase, _ in PHASES:
            at = [run["milestones"][phase] for run in runs if phase in run.get("milestones", {})]
            if phase.startswith("daemons") and not any(_had_daemon_pods(r) for r in runs):
                continue  # per clique: no daemon pods (its registry entries are the cliques')
            if at:
                out.append(Bar(name, phase, statistics.median(at), min(at), max(at), len(at)))
    return out
