"""The floor table: the same pods with and without a ComputeDomain (issue 26 point 6, 28 point 4).

Floor runs are ``cdctl bench formation --prefix floor --workload plain|affinity|claims`` (and
``--prefix floor-virtual`` on virtual nodes): the same workload pods with no claim and no
podAffinity, with podAffinity only, and with our claims. One row per workload and N, each the
median (min..max) of that file's runs, so what the scheduler and the kubelets cost without any
domain stands beside what our claims add. ``÷ plain`` divides a row's apply → pods Running by
that of the plain workload at the same N and node mode (the newest such file). Pure functions
over the result files.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

PREFIX = "floor"
"""Result files the table reads: ``floor*-formation-*.json``."""

_ORDER = ("plain", "affinity", "claims")


def documents(results_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every floor result file's name and document, oldest first."""
    return [
        (path.name, json.loads(path.read_text()))
        for path in sorted(
            results_dir.glob(f"{PREFIX}*-formation-*.json"), key=lambda p: p.name.rsplit("-", 2)[1:]
        )
    ]


def _span(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def rows(docs: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per (node mode, N, workload): the newest file that measured it wins."""
    found: dict[tuple[str, int, str], dict[str, Any]] = {}
    for source, doc in docs:
        mode = str(doc.get("nodes_mode") or "process")
        workload = str(doc.get("workload", "claims"))
        for result in doc.get("results", []):
            runs = result.get("runs") or []
            if not runs:
                continue
            scheduled = [
                r["milestones"]["workloads_scheduled"]
                for r in runs
                if "workloads_scheduled" in (r.get("milestones") or {})
            ]
            cd_ready = [r["cd_ready_s"] for r in runs if r.get("cd_ready_s") is not None]
            torn = [r["teardown_s"] for r in runs if r.get("teardown_s") is not None]
            found[(mode, result["n"], workload)] = {
                "mode": mode,
                "n": result["n"],
                "workload": workload,
                "repeats": len(runs),
                "scheduled_s": _span(scheduled) if scheduled else None,
                "running_s": _span([r["workloads_running_s"] for r in runs]),
                "cd_ready_s": _span(cd_ready) if cd_ready else None,
                "teardown_s": _span(torn) if torn else None,
                "writes_per_pod": statistics.median(
                    r["writes_formation_no_leases"] / r["n"] for r in runs
                ),
                "cpu_s": statistics.median(sum(r.get("cpu_s", {}).values()) for r in runs),
                "loads": [(r.get("load_start", 0.0), r.get("load_end", 0.0)) for r in runs],
                "source": source,
            }
    return sorted(
        found.values(),
        key=lambda r: (
            r["mode"],
            r["n"],
            _ORDER.index(r["workload"]) if r["workload"] in _ORDER else 9,
        ),
    )


def _cell(span: dict[str, float] | None) -> str:
    if span is None:
        return "-"
    return f"{span['median']:.1f} s ({span['min']:.1f}..{span['max']:.1f})"


def table(results_dir: Path) -> str:
    """The Markdown block: every floor row, its ratio to plain, its loads and its source."""
    found = rows(documents(results_dir))
    if not found:
        return (
            "No floor runs recorded yet (`cdctl bench formation --prefix floor --workload plain`)."
        )
    plain = {
        (r["mode"], r["n"]): r["running_s"]["median"] for r in found if r["workload"] == "plain"
    }
    lines = [
        "| nodes | N | workload | runs | all pods scheduled | apply → all pods Running | "
        "÷ plain | CD Ready | teardown | non-Lease writes / pod | CPU, every sim process | "
        "load (1 min) at apply → after teardown, per run | source |",
        "|---|---:|---|---:|---|---|---:|---|---|---:|---:|---|---|",
    ]
    for r in found:
        base = plain.get((r["mode"], r["n"]))
        ratio = f"{r['running_s']['median'] / base:.2f}" if base else "-"
        loads = ", ".join(f"{a:.1f} → {b:.1f}" for a, b in r["loads"])
        lines.append(
            f"| {r['mode']} | {r['n']} | {r['workload']} | {r['repeats']} | "
            f"{_cell(r['scheduled_s'])} | {_cell(r['running_s'])} | {ratio} | "
            f"{_cell(r['cd_ready_s'])} | {_cell(r['teardown_s'])} | "
            f"{r['writes_per_pod']:.1f} | {r['cpu_s']:.1f} s | {loads} | `{r['source']}` |"
        )
    return "\n".join(lines)
