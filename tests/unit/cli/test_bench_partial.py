"""``cdctl bench formation`` keeps the finished rounds' results when a later round is cut short.

The rounds themselves (a sim, helm, a formation) are replaced by a stand-in that returns a
round without runs or, for the round that is "cut", raises as a caller's time limit does
(SIGINT: KeyboardInterrupt); this checks only the result file's bookkeeping around them.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from compute_domains.bench import roundresults
from compute_domains.cli import bench, benchdrivers


def _fake_rounds(monkeypatch: pytest.MonkeyPatch, cut_at: int | None) -> list[int]:
    ran: list[int] = []

    def run_round(rnd: Any, **_: Any) -> roundresults.RoundResult:
        if rnd.index == cut_at:
            raise KeyboardInterrupt
        ran.append(rnd.index)
        return roundresults.RoundResult(
            index=rnd.index,
            repeat=rnd.repeat,
            driver=rnd.driver.name,
            sim_up_s=1.0,
            load_before_sim=0.5,
            install_s=2.0,
        )

    monkeypatch.setattr(benchdrivers, "run_round", run_round)
    monkeypatch.setattr(
        bench.tools, "build_tools", lambda console: types.SimpleNamespace(bin_dir=Path("/none"))
    )
    monkeypatch.setattr(bench.othersims, "others", lambda home, own: [])
    return ran


ARGS = ["formation", "--sizes", "4", "--repeats", "3", "--prefix", "t"]


def test_a_cut_round_leaves_the_finished_rounds_in_the_result_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran = _fake_rounds(monkeypatch, cut_at=2)
    result = CliRunner().invoke(bench.group, [*ARGS, "--results-dir", str(tmp_path)])
    assert result.exit_code == 1 and "Aborted!" in result.output, result.output  # click's
    assert ran == [0, 1]
    [written] = list(tmp_path.glob("t-formation-*.json"))
    doc = json.loads(written.read_text())
    assert doc["partial"] == "2 of 3 rounds"
    assert [r["index"] for r in doc["rounds"]] == [0, 1]
    assert [r["install_s"] for r in doc["rounds"]] == [2.0, 2.0]


def test_a_whole_run_writes_one_file_without_the_partial_mark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ran = _fake_rounds(monkeypatch, cut_at=None)
    result = CliRunner().invoke(bench.group, [*ARGS, "--results-dir", str(tmp_path)])
    assert ran == [0, 1, 2]
    [written] = list(tmp_path.glob("t-formation-*.json"))
    doc = json.loads(written.read_text())
    assert "partial" not in doc
    assert [r["index"] for r in doc["rounds"]] == [0, 1, 2]
    assert result.exit_code == 0, result.output
