"""The scale table (bench/scale.py): rows per run, per-node figures, targets missed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compute_domains.bench import scale


def _run(n: int, ready: float, writes: float, failed: dict[str, int] | None = None) -> Any:
    return {
        "n": n,
        "cd_ready_s": ready,
        "workloads_running_s": ready + 1,
        "teardown_s": 3.0,
        "last_daemon_to_cd_ready_s": 0.2,
        "writes_formation_no_leases": writes,
        "failed_formation": failed or {},
        "load_start": 2.0,
    }


def _write(path: Path, runs: list[Any], per_node: int = 1) -> None:
    cpu = {"driver controller": 1.8, "kube-apiserver": 7.2}
    doc = {"pods_per_node": per_node, "results": [{"cpu_s": cpu, "runs": runs}]}
    path.write_text(json.dumps(doc))


def test_rows_divide_by_nodes_and_count_only_clique_conflicts(tmp_path: Path) -> None:
    _write(tmp_path / "scale-formation-1.json", [_run(18, 9.0, 18 * 40)])
    _write(
        tmp_path / "scale816-formation-1.json",
        [_run(256, 30.0, 64 * 50, {"PATCH computedomaincliques 422": 8, "PUT daemonsets 409": 5})],
        per_node=4,
    )
    _write(tmp_path / "formation-1.json", [_run(4, 1.0, 100)])  # not a scale file
    found = scale.rows(scale.documents(tmp_path))
    assert [(r["pods"], r["nodes"], r["per_node"]) for r in found] == [(18, 18, 1), (256, 64, 4)]
    assert found[0]["writes_per_node"] == 40
    assert found[1]["conflicts_per_join"] == 8 / 64
    assert found[0]["controller_cpu_ms_per_node"] == 100


def test_verdicts_say_by_how_much_a_target_is_missed() -> None:
    row = {
        "nodes": 72,
        "per_node": 1,
        "cd_ready_s": 30.0,
        "writes_per_node": 48.0,
        "conflicts_per_join": 0.5,
        "status_path_s": 1.5,
    }
    assert scale.verdicts(row, base_writes=40.0) == [
        "CD Ready 2.0x the 15 s target",
        "writes/node +20 %",
        "0.50 conflicts/join",
        "status path 1.50 s",
    ]
    met = row | {"cd_ready_s": 14.0, "writes_per_node": 43.0, "conflicts_per_join": 0.0}
    assert scale.verdicts(met | {"status_path_s": 0.3}, base_writes=40.0) == []


def test_table_lists_every_run_and_says_when_there_is_none(tmp_path: Path) -> None:
    assert "No scale runs" in scale.table(tmp_path)
    _write(tmp_path / "scale-formation-1.json", [_run(18, 9.0, 720), _run(72, 20.0, 72 * 41)])
    text = scale.table(tmp_path)
    assert text.count("`scale-formation-1.json`") == 2
    assert "CD Ready 1.3x the 15 s target" in text


def test_sizes_that_did_not_form_are_listed_with_their_source(tmp_path: Path) -> None:
    doc = {"pods_per_node": 1, "results": [], "failures": ["round 1 (ours) N=288: not formed"]}
    (tmp_path / "scale-formation-2.json").write_text(json.dumps(doc))
    text = scale.table(tmp_path)
    assert "- round 1 (ours) N=288: not formed (`scale-formation-2.json`)" in text


def test_an_unfinished_teardown_is_shown_as_such(tmp_path: Path) -> None:
    _write(tmp_path / "scale-formation-1.json", [_run(18, 9.0, 720) | {"teardown_s": None}])
    assert "| 10.0 s | unfinished | 0.20 s |" in scale.table(tmp_path)
