"""Benchmark tables rendered into docs/benchmarks.md blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compute_domains.bench import report


def _span(m: float) -> dict[str, float]:
    return {"median": m, "min": m - 1, "max": m + 1}


FORMATION = {
    "machine": "2 cores",
    "load_at_end": 3.0,
    "results": [
        {
            "n": 18,
            "repeats": 3,
            "daemons_ready_s": _span(8.0),
            "workloads_running_s": _span(9.0),
            "cd_ready_s": _span(8.5),
            "last_daemon_to_cd_ready_s": _span(0.2),
            "teardown_s": _span(5.0),
            "writes_formation": _span(400),
            "writes_formation_no_leases": _span(270),
            "cpu_s": {"driver controller": 1.5, "kubelet plugins": 4.0, "kube-apiserver": 9.0},
            "runs": [{"milestones": {"claims_created": 0.4, "daemons_created": 2.5, "cd": 8.5}}],
        }
    ],
}


def test_formation_table_has_the_numbers_and_the_breakdown() -> None:
    text = report.render("formation", FORMATION, "bench/results/formation-x.json")
    assert "| 18 | 3 | 8.0 s (7.0..9.0) | 9.0 s (8.0..10.0) | 8.5 s (7.5..9.5) |" in text
    assert "| 270 | 15.0 | 1.5 s | 4.0 s |" in text
    assert "| 18 | 0.4 | - | - | 2.5 | - |" in text
    assert "bench/results/formation-x.json" in text
    assert "| kube-apiserver | 9.0 |" in text
    assert "start-up steps" not in text  # no run reported any


def test_formation_table_shows_the_daemons_own_steps() -> None:
    step = {"at_median": 3.2, "at_max": 5.5, "took_median": 1.25, "took_max": 2.0, "daemons": 18}
    run = {"milestones": {}, "daemon_steps": {"registered": step}}
    doc = {**FORMATION, "results": [{**FORMATION["results"][0], "runs": [run]}]}  # type: ignore[dict-item]
    text = report.render("formation", doc, "x.json")
    assert "| N | daemons | registered |" in text
    assert "| 18 | 18 | 3.20 / 5.50 [1.25] |" in text


def test_churn_table_lists_problems() -> None:
    doc = {
        "lanes": 3,
        "nodes_per_cd": 2,
        "summary": {
            "cycles": 36,
            "failed": 1,
            "formation_p50_s": 6.0,
            "formation_p99_s": 9.5,
            "teardown_p50_s": 3.0,
            "teardown_p99_s": 4.0,
            "problems": ["lane 0 cycle 3: x"],
        },
    }
    text = report.render("churn", doc, "c.json")
    assert "| 3 | 2 | 36 | 1 | 6.0 s | 9.5 s | 3.0 s | 4.0 s |" in text
    assert "- lane 0 cycle 3: x" in text


def test_update_doc_replaces_only_the_block() -> None:
    text = "intro\n<!-- bench:churn -->\nold\n<!-- /bench:churn -->\noutro\n"
    out = report.update_doc(text, {"churn": "new table"})
    assert out == "intro\n<!-- bench:churn -->\nnew table\n<!-- /bench:churn -->\noutro\n"
    with pytest.raises(ValueError, match="bench:formation"):
        report.update_doc(text, {"formation": "x"})


def test_latest_picks_the_newest_file(tmp_path: Path) -> None:
    assert report.latest(tmp_path, "churn") is None
    for stamp in ("20261129-100000", "20261129-120000"):
        (tmp_path / f"churn-{stamp}.json").write_text(json.dumps({"stamp": stamp}))
    found = report.latest(tmp_path, "churn")
    assert found is not None
    assert found[1] == {"stamp": "20261129-120000"}


def test_formation_table_names_the_workload_and_leaves_unmeasured_cells_empty() -> None:
    assert "Workload: claims (a ComputeDomain" in report.render("formation", FORMATION, "x")
    result = {
        **FORMATION["results"][0],  # type: ignore[index]
        "daemons_ready_s": None,
        "cd_ready_s": None,
        "last_daemon_to_cd_ready_s": None,
        "runs": [{"milestones": {"workloads_scheduled": 1.5, "workloads": 3.0}}],
    }
    doc = {**FORMATION, "workload": "plain", "results": [result]}
    text = report.render("formation", doc, "x.json")
    assert text.startswith("Workload: plain (the same pods, no ComputeDomain, no claim, no")
    assert "| 18 | 3 | - | 9.0 s (8.0..10.0) | - | - | 5.0 s (4.0..6.0) |" in text
