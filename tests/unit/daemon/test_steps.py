"""The daemon's start-up steps: process start from /proc, one line and one metric per step."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from compute_domains.daemon import steps
from compute_domains.infra import logs

# A stat line whose command name holds a space and a parenthesis (field 22 = starttime 12345).
STAT = "4242 (cdctl (x) y) S 1 4242 4242 0 -1 4194560 " + " ".join(["0"] * 12) + " 12345 0 0"


def test_the_start_time_is_field_22_after_the_command_name() -> None:
    assert steps.start_from_stat(STAT, 100) == pytest.approx(123.45)
    with pytest.raises(ValueError):
        steps.start_from_stat("4242 (short) S 1", 100)


def test_this_process_started_before_now_on_the_same_clock(tmp_path: Path) -> None:
    started = steps.process_start()
    assert started is not None and 0 < started <= steps.boottime()
    assert steps.process_start(tmp_path / "missing") is None


def test_each_step_counts_once_from_the_process_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    seen: list[tuple[str, float]] = []
    timeline = steps.Steps(
        started_at=98.5,
        clock=lambda: now[0],
        on_step=lambda step, s: seen.append((step, s)),
        fields={"node": "n1"},
    )
    with caplog.at_level(logging.INFO, logger=steps.__name__):
        timeline.mark(steps.SETTINGS_LOADED)
        now[0] = 101.0
        timeline.mark(steps.POD_LABELLED)
        timeline.mark(steps.SETTINGS_LOADED)  # again: the first time counts
        now[0] = 103.25
        timeline.mark(steps.REGISTERED)
    assert seen == [("settings_loaded", 1.5), ("pod_labelled", 2.5), ("registered", 4.75)]
    assert timeline.done == {"settings_loaded": 1.5, "pod_labelled": 2.5, "registered": 4.75}
    records = [r for r in caplog.records if r.name == steps.__name__]
    assert [(r.step, r.since_start_s, r.since_prev_s, r.node) for r in records] == [  # type: ignore[attr-defined]
        ("settings_loaded", 1.5, 1.5, "n1"),
        ("pod_labelled", 2.5, 1.0, "n1"),
        ("registered", 4.75, 2.25, "n1"),
    ]
    assert records[2].getMessage() == (
        "startup step registered: 4.750s after process start (+2.250s)"
    )


def test_without_a_process_start_the_first_step_is_zero() -> None:
    now = [7.0]
    timeline = steps.Steps(started_at=None, clock=lambda: now[0])
    timeline.mark(steps.POD_LABELLED)
    now[0] = 8.0
    timeline.mark(steps.REGISTERED)
    assert timeline.done == {"pod_labelled": 0.0, "registered": 1.0}


@pytest.mark.usefixtures("root_restored")
def test_a_step_line_carries_its_fields_in_text_and_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for fmt in ("text", "json"):
        logs.setup("info", fmt)  # type: ignore[arg-type]
        steps.Steps(started_at=1.0, clock=lambda: 3.5).mark(steps.IMEX_READY)
    text, json_line = capsys.readouterr().err.strip().splitlines()
    assert text.endswith("step=imex_ready since_start_s=2.5 since_prev_s=2.5")
    assert '"step": "imex_ready", "since_start_s": 2.5, "since_prev_s": 2.5' in json_line
