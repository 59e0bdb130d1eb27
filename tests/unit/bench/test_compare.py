"""Drivers side by side: cells, ratios to ours, CPU per kind, rounds with their load."""

from __future__ import annotations

from typing import Any

import pytest

from compute_domains.bench import compare, report


def _span(m: float, lo: float | None = None, hi: float | None = None) -> dict[str, float]:
    return {"median": m, "min": m if lo is None else lo, "max": m if hi is None else hi}


def _summary(
    driver: str, n: int, cd: float, writes: float, cpu_s: dict[str, float]
) -> dict[str, Any]:
    return {
        "driver": driver,
        "n": n,
        "repeats": 3,
        "cd_ready_s": _span(cd, cd - 1, cd + 1),
        "workloads_running_s": _span(cd + 1),
        "daemons_ready_s": _span(cd - 0.5),
        "last_daemon_to_cd_ready_s": _span(0.25),
        "teardown_s": _span(5.0),
        "writes_formation": _span(writes + 100),
        "writes_formation_no_leases": _span(writes),
        "writes_teardown": _span(50),
        "cpu_total_s": _span(sum(cpu_s.values())),
        "cpu_driver_s": _span(cpu_s.get("IMEX daemons", 0.0)),
        "cpu_s": cpu_s,
    }


DOC: dict[str, Any] = {
    "machine": "2 cores",
    "load_at_end": 1.5,
    "drivers": [{"name": "ours"}, {"name": "nvidia"}],
    "results": [
        _summary("ours", 4, 6.8, 194, {"IMEX daemons": 3.0, "kube-apiserver": 3.0}),
        _summary("ours", 18, 40.0, 950, {"IMEX daemons": 11.5, "kube-apiserver": 15.0}),
        _summary("nvidia", 4, 5.1, 182, {"IMEX daemons": 0.6, "simulated nvidia-imex(-ctl)": 1.0}),
        _summary("nvidia", 18, 16.0, 800, {"IMEX daemons": 2.3, "kube-apiserver": 7.5}),
    ],
    "rounds": [
        {
            "index": 0,
            "driver": "ours",
            "load_before_sim": 0.4,
            "sim_up_s": 31.0,
            "install_s": 12.0,
            "ready_s": 0.5,
            "runs": [{"n": 4, "load_start": 1.2, "load_end": 2.5}],
            "failures": [],
        },
        {
            "index": 1,
            "driver": "nvidia",
            "load_before_sim": 0.9,
            "sim_up_s": 30.0,
            "install_s": 5.0,
            "ready_s": 9.0,
            "runs": [],
            "failures": ["round 2 (nvidia): helm failed"],
        },
    ],
    "failures": ["round 2 (nvidia): helm failed"],
}


@pytest.mark.parametrize(
    ("other", "base", "expected"), [(5.0, 10.0, 0.5), (3.0, 2.0, 1.5), (1.0, 0.0, None)]
)
def test_ratio_is_other_over_ours(other: float, base: float, expected: float | None) -> None:
    assert compare.ratio(other, base) == expected


def test_metric_rows_put_drivers_side_by_side_with_the_ratio() -> None:
    rows = compare.metric_rows(DOC)
    assert rows[0] == "| N | metric | ours | nvidia | nvidia / ours |"
    assert "| 4 | apply → CD Ready | 6.8 s (5.8..7.8) | 5.1 s (4.1..6.1) | 0.75 |" in rows
    assert "| 18 | apply → CD Ready | 40.0 s (39.0..41.0) | 16.0 s (15.0..17.0) | 0.40 |" in rows
    assert (
        "| 18 | API writes without Leases, formation | 950 (950..950) | 800 (800..800) | 0.84 |"
        in rows
    )
    assert (
        "| 4 | last daemon Ready → CD Ready | 0.25 s (0.25..0.25) | 0.25 s (0.25..0.25) | 1.00 |"
        in rows
    )
    assert sum(1 for r in rows if r.startswith("| 4 |")) == len(compare.METRICS)


def test_a_missing_driver_or_kind_shows_a_dash_not_a_ratio() -> None:
    doc = DOC | {"results": [r for r in DOC["results"] if (r["driver"], r["n"]) != ("ours", 18)]}
    assert "| 18 | apply → CD Ready | - | 16.0 s (15.0..17.0) | - |" in compare.metric_rows(doc)
    cpu = compare.cpu_rows(DOC)
    assert "| 4 | simulated nvidia-imex(-ctl) | - | 1.0 | - |" in cpu
    assert "| 4 | IMEX daemons | 3.0 | 0.6 | 0.20 |" in cpu
    # Kinds are listed largest first within each N.
    assert cpu.index("| 18 | kube-apiserver | 15.0 | 7.5 | 0.50 |") < cpu.index(
        "| 18 | IMEX daemons | 11.5 | 2.3 | 0.20 |"
    )


def test_rounds_show_the_load_around_each() -> None:
    rows = compare.round_rows(DOC)
    assert "| 1 | ours | 0.4 | 1.2 → 2.5 | 31.0 s | 12.0 s | 0.5 s | 0 |" in rows
    assert "| 2 | nvidia | 0.9 | - | 30.0 s | 5.0 s | 9.0 s | 1 |" in rows


def test_the_sidebyside_block_is_a_report_kind() -> None:
    assert "sidebyside" in report.KINDS
    text = report.render("sidebyside", DOC, "bench/results/sidebyside-x.json")
    assert text.startswith("Medians (min..max) of 3 runs per driver and N; ratio = other ÷ ours")
    assert "- round 2 (nvidia): helm failed" in text
    source = "`bench/results/sidebyside-x.json` (2 cores, workload claims, load average 1.5"
    assert f"{source} at the end)" in text  # a file without a workload is of claims
    doc = "a\n<!-- bench:sidebyside -->\nold\n<!-- /bench:sidebyside -->\nb\n"
    assert "old" not in report.update_doc(doc, {"sidebyside": text})


def test_without_ours_the_first_driver_is_the_base() -> None:
    doc = DOC | {
        "drivers": [{"name": "nvidia"}, {"name": "other"}],
        "results": [
            _summary("nvidia", 4, 5.0, 100, {}),
            _summary("other", 4, 10.0, 100, {}),
        ],
    }
    assert "| 4 | apply → CD Ready | 5.0 s (4.0..6.0) | 10.0 s (9.0..11.0) | 2.00 |" in (
        compare.metric_rows(doc)
    )
