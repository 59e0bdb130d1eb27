"""The floor table (bench/floor.py): the same pods with and without a ComputeDomain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compute_domains.bench import floor, scale


def _run(n: int, running: float, *, cd: float | None = None, sched: float = 1.0) -> Any:
    return {
        "n": n,
        "workloads_running_s": running,
        "cd_ready_s": cd,
        "teardown_s": 2.0,
        "last_daemon_to_cd_ready_s": None if cd is None else 0.1,
        "writes_formation_no_leases": 10 * n,
        "milestones": {"workloads_scheduled": sched, "workloads": running},
        "cpu_s": {"kube-apiserver": 3.0, "sim kubelets": 1.0},
        "load_start": 1.5,
        "load_end": 2.5,
    }


def _write(path: Path, workload: str | None, runs: list[Any], mode: str = "process") -> None:
    doc: dict[str, Any] = {"nodes_mode": mode, "results": [{"n": runs[0]["n"], "runs": runs}]}
    if workload is not None:
        doc["workload"] = workload
    path.write_text(json.dumps(doc))


def test_rows_put_the_workloads_of_one_n_together_with_their_ratio_to_plain(
    tmp_path: Path,
) -> None:
    _write(
        tmp_path / "floor-formation-20261206-010000.json", "plain", [_run(18, 4.0), _run(18, 6.0)]
    )
    _write(tmp_path / "floor-formation-20261206-020000.json", "affinity", [_run(18, 7.5)])
    # No workload field: a file from before the option, a claims run.
    _write(tmp_path / "floor-formation-20261206-030000.json", None, [_run(18, 15.0, cd=14.0)])
    _write(tmp_path / "formation-20261206-040000.json", "plain", [_run(18, 99.0)])  # not floor
    found = floor.rows(floor.documents(tmp_path))
    assert [(r["workload"], r["repeats"]) for r in found] == [
        ("plain", 2),
        ("affinity", 1),
        ("claims", 1),
    ]
    text = floor.table(tmp_path)
    assert (
        "| process | 18 | plain | 2 | 1.0 s (1.0..1.0) | 5.0 s (4.0..6.0) | 1.00 | - | "
        "2.0 s (2.0..2.0) | 10.0 | 4.0 s | 1.5 → 2.5, 1.5 → 2.5 |" in text
    )
    assert (
        "| process | 18 | affinity | 1 | 1.0 s (1.0..1.0) | 7.5 s (7.5..7.5) | 1.50 | - |" in text
    )
    assert "| 15.0 s (15.0..15.0) | 3.00 | 14.0 s (14.0..14.0) |" in text
    assert "99.0" not in text


def test_the_newest_file_of_a_workload_and_n_wins_and_modes_stay_apart(tmp_path: Path) -> None:
    _write(tmp_path / "floor-formation-20261206-010000.json", "plain", [_run(4, 9.0)])
    _write(tmp_path / "floor-formation-20261206-020000.json", "plain", [_run(4, 3.0)])
    _write(
        tmp_path / "floor-virtual-formation-20261206-000000.json",
        "plain",
        [_run(4, 1.0)],
        "virtual",
    )
    found = floor.rows(floor.documents(tmp_path))
    assert [(r["mode"], r["running_s"]["median"]) for r in found] == [
        ("process", 3.0),
        ("virtual", 1.0),
    ]


def test_no_floor_run_says_how_to_make_one(tmp_path: Path) -> None:
    assert "No floor runs recorded yet" in floor.table(tmp_path)


def test_the_scale_table_leaves_out_runs_without_a_domain(tmp_path: Path) -> None:
    _write(tmp_path / "scale-formation-1.json", "plain", [_run(72, 3.0)])
    _write(tmp_path / "scale-formation-2.json", None, [_run(72, 12.0, cd=11.0)])
    assert [r["pods_running_s"] for r in scale.rows(scale.documents(tmp_path))] == [12.0]


def test_a_run_whose_teardown_did_not_end_keeps_its_row(tmp_path: Path) -> None:
    runs = [_run(18, 2.0), _run(18, 3.0) | {"teardown_s": None}]
    _write(tmp_path / "floor-formation-1.json", "plain", runs)
    (row,) = floor.rows(floor.documents(tmp_path))
    assert row["running_s"] == {"median": 2.5, "min": 2.0, "max": 3.0}
    assert row["teardown_s"] == {"median": 2.0, "min": 2.0, "max": 2.0}
