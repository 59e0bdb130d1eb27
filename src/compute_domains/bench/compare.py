"""Drivers side by side: one row per size and metric, each driver's median and spread, and the
ratio of every other driver to ours (the ``sidebyside`` block of docs/benchmarks.md).

Input is a result document of ``cdctl bench formation`` with more than one driver
(``bench.roundresults.document``). A ratio is other ÷ ours of the medians: below 1 the other
driver is faster (or cheaper) than ours, above 1 it is slower. Pure functions over plain data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from compute_domains.bench import drivers


@dataclasses.dataclass(frozen=True, slots=True)
class Metric:
    """One compared quantity of a (driver, N) summary."""

    key: str
    """Its key in the summary (a ``{"median", "min", "max"}`` dict)."""
    label: str
    unit: str
    """``" s"`` for seconds, ``""`` for counts."""
    digits: int


METRICS = (
    Metric("cd_ready_s", "apply → CD Ready", " s", 1),
    Metric("workloads_running_s", "apply → all workload pods Running with their channel", " s", 1),
    Metric("daemons_ready_s", "apply → all daemon pods Ready", " s", 1),
    Metric("last_daemon_to_cd_ready_s", "last daemon Ready → CD Ready", " s", 2),
    Metric("teardown_s", "teardown (delete → nothing left)", " s", 1),
    Metric("writes_formation", "API writes, formation", "", 0),
    Metric("writes_formation_no_leases", "API writes without Leases, formation", "", 0),
    Metric("writes_teardown", "API writes, teardown", "", 0),
    Metric("cpu_total_s", "CPU, every sim process (apply → formed)", " s", 1),
    Metric("cpu_driver_s", "CPU, the driver's own processes (apply → formed)", " s", 1),
)


def ratio(other: float, base: float) -> float | None:
    """``other / base``, or None when the base is zero (no ratio to show)."""
    return None if base == 0 else other / base


def _ratio_cell(other: float | None, base: float | None) -> str:
    if other is None or base is None:
        return "-"
    r = ratio(other, base)
    return "-" if r is None else f"{r:.2f}"


def _cell(span: dict[str, float] | None, m: Metric) -> str:
    if span is None:
        return "-"
    d = m.digits
    return f"{span['median']:.{d}f}{m.unit} ({span['min']:.{d}f}..{span['max']:.{d}f})"


def _order(doc: dict[str, Any]) -> tuple[str, list[str]]:
    """(the driver ratios divide by, every driver in the order given)."""
    names = [d["name"] for d in doc.get("drivers", [])] or sorted(
        {r["driver"] for r in doc["results"]}
    )
    base = drivers.OURS if drivers.OURS in names else names[0]
    return base, names


def _by_key(doc: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r["driver"], r["n"]): r for r in doc["results"]}


def _header(base: str, names: list[str], first: str) -> list[str]:
    others = [n for n in names if n != base]
    cols = [first, *names, *(f"{o} / {base}" for o in others)]
    return [
        "| N | " + " | ".join(cols) + " |",
        "|---:|---|" + "---|" * len(names) + "---:|" * len(others),
    ]


def metric_rows(doc: dict[str, Any]) -> list[str]:
    """The main table: per N and metric, each driver's median (min..max) and the ratios."""
    base, names = _order(doc)
    results = _by_key(doc)
    sizes = sorted({n for _, n in results})
    rows = _header(base, names, "metric")
    for n in sizes:
        for m in METRICS:
            spans = {d: (results.get((d, n)) or {}).get(m.key) for d in names}
            if all(s is None for s in spans.values()):
                continue
            base_span = spans[base]
            cells = [_cell(spans[d], m) for d in names]
            cells += [
                _ratio_cell(
                    (spans[o] or {}).get("median"),
                    base_span["median"] if base_span else None,
                )
                for o in names
                if o != base
            ]
            rows.append(f"| {n} | {m.label} | " + " | ".join(cells) + " |")
    return rows


def cpu_rows(doc: dict[str, Any]) -> list[str]:
    """CPU seconds per kind of process (median of the runs) per N, with the ratios."""
    base, names = _order(doc)
    results = _by_key(doc)
    sizes = sorted({n for _, n in results})
    rows = _header(base, names, "process")
    for n in sizes:
        present = [d for d in names if (d, n) in results]
        per: dict[str, dict[str, float]] = {d: results[(d, n)]["cpu_s"] for d in present}
        kinds = sorted(
            {k for c in per.values() for k in c},
            key=lambda k: -max(c.get(k, 0.0) for c in per.values()),
        )
        for k in kinds:
            cells = [f"{per[d][k]:.1f}" if k in per.get(d, {}) else "-" for d in names]
            base_v = per.get(base, {}).get(k)
            cells += [_ratio_cell(per.get(o, {}).get(k), base_v) for o in names if o != base]
            rows.append(f"| {n} | {k} | " + " | ".join(cells) + " |")
    return rows


def round_rows(doc: dict[str, Any]) -> list[str]:
    """The rounds in the order they ran, with the machine's load around each."""
    rows = [
        "| round | driver | load before sim up | load at first apply → after last teardown | "
        "sim up | helm install | ready after helm | failures |",
        "|---:|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in doc.get("rounds", []):
        runs = r.get("runs") or []
        loads = f"{runs[0]['load_start']:.1f} → {runs[-1]['load_end']:.1f}" if runs else "-"
        rows.append(
            f"| {r['index'] + 1} | {r['driver']} | {r['load_before_sim']:.1f} | {loads} | "
            f"{r['sim_up_s']:.1f} s | {r['install_s']:.1f} s | {r['ready_s']:.1f} s | "
            f"{len(r.get('failures') or [])} |"
        )
    return rows


def side_by_side(doc: dict[str, Any], source: str) -> str:
    """The whole Markdown block: metrics, CPU per kind, rounds, failures, source."""
    base, _ = _order(doc)
    repeats = sorted({r["repeats"] for r in doc["results"]})
    text = [
        f"Medians (min..max) of {'/'.join(str(x) for x in repeats)} runs per driver and N; "
        f"ratio = other ÷ {base} (below 1: faster or cheaper than {base}).",
        "",
        *metric_rows(doc),
        "",
        "CPU seconds per kind of process from the apply until formed (medians; exec probes "
        "and ended containers count as exited children of the sim kubelets):",
        "",
        *cpu_rows(doc),
        "",
        "Rounds, in the order they ran (each a fresh sim; 1-minute load averages):",
        "",
        *round_rows(doc),
    ]
    if doc.get("failures"):
        text += ["", "Failures:", "", *(f"- {f}" for f in doc["failures"])]
    text += [
        "",
        f"Source: `{source}` ({doc.get('machine', '?')}, workload "
        f"{doc.get('workload', 'claims')}, load average "
        f"{doc.get('load_at_end', 0):.1f} at the end).",
    ]
    return "\n".join(text)
