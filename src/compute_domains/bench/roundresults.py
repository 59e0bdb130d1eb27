"""What the rounds of ``cdctl bench formation`` measured, and their summary.

``RoundResult`` is one round's record (``bench.rounds.run_round`` fills it in). ``summarize``
groups the runs of all rounds by driver and size; ``document`` is what ``bench/results/*.json``
holds. Pure functions over plain data: nothing here touches a cluster.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from compute_domains.bench import cpu, drivers, formation


@dataclasses.dataclass(kw_only=True, slots=True)
class RoundResult:
    """What one round measured; ``runs`` pairs each run with its CPU seconds per kind."""

    index: int
    repeat: int
    driver: str
    sim_up_s: float
    load_before_sim: float
    install_s: float = 0.0
    """``helm upgrade --install --wait`` until it returned."""
    ready_s: float = 0.0
    """From helm's return until every driver pod was Ready and every GPU node had a slice."""
    install_pods: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Per component, the pods' status writes and Ready transitions from helm's start until
    ``ready_s`` ended (``podflaps.Counts``)."""
    load_end: float = 0.0
    runs: list[tuple[formation.Run, dict[str, float]]] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        """The round as plain data, without its runs (they are under ``results``)."""
        return {
            "index": self.index,
            "repeat": self.repeat,
            "driver": self.driver,
            "sim_up_s": round(self.sim_up_s, 1),
            "load_before_sim": self.load_before_sim,
            "install_s": round(self.install_s, 1),
            "ready_s": round(self.ready_s, 1),
            "install_pods": self.install_pods,
            "load_end": self.load_end,
            "runs": [
                {"n": r.n, "load_start": r.load_start, "load_end": r.load_end} for r, _ in self.runs
            ],
            "failures": self.failures,
        }


def _span(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(rounds: Sequence[RoundResult], order: Sequence[str]) -> list[dict[str, Any]]:
    """One summary per (driver, N) that has runs: driver in ``order``, then N ascending.

    Each is ``formation.summarize`` plus the driver's name, the median CPU seconds per kind,
    and the spread of two per-run totals: every sampled process (``cpu_total_s``) and the
    driver's own processes (``cpu_driver_s``). Totals are summed per run before the median:
    a sum of per-kind medians would mix different runs.
    """
    groups: dict[tuple[str, int], list[tuple[formation.Run, dict[str, float], int]]] = {}
    for r in rounds:
        for run, used in r.runs:
            groups.setdefault((r.driver, run.n), []).append((run, used, r.index))
    out = []
    for key in sorted(groups, key=lambda k: (list(order).index(k[0]), k[1])):
        runs = groups[key]
        summary = formation.summarize([run for run, _, _ in runs])
        kinds = {k for _, used, _ in runs for k in used}
        summary["driver"] = key[0]
        summary["cpu_s"] = {
            k: statistics.median([used.get(k, 0.0) for _, used, _ in runs]) for k in sorted(kinds)
        }
        summary["cpu_total_s"] = _span([round(sum(used.values()), 2) for _, used, _ in runs])
        summary["cpu_driver_s"] = _span([cpu.driver_total(used) for _, used, _ in runs])
        summary["runs"] = [
            {**dataclasses.asdict(run), "cpu_s": used, "round": index} for run, used, index in runs
        ]
        out.append(summary)
    return out


def document(specs: Sequence[drivers.DriverSpec], rounds: Sequence[RoundResult]) -> dict[str, Any]:
    """The result file's body (the CLI adds the machine and the final load average)."""
    return {
        "drivers": [s.describe() for s in specs],
        "rounds": [r.describe() for r in rounds],
        "results": summarize(rounds, [s.name for s in specs]),
        "failures": [f for r in rounds for f in r.failures],
    }
