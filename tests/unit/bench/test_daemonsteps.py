"""The daemons' start-up steps, parsed from their log lines (text and JSON) and summarised."""

from __future__ import annotations

from compute_domains.bench import daemonsteps

TEXT_LOG = """\
2026-12-01 10:00:00,100 INFO    compute_domains.cli.serving: logging: Verbosity: info
2026-12-01 10:00:00,200 INFO    compute_domains.daemon.steps: startup step settings_loaded: \
0.800s after process start (+0.800s) node=n1 step=settings_loaded since_start_s=0.8 \
since_prev_s=0.8
2026-12-01 10:00:01,000 INFO    compute_domains.daemon.steps: startup step registered: 1.600s \
after process start (+0.800s) node=n1 step=registered since_start_s=1.6 since_prev_s=0.8
2026-12-01 10:00:01,000 INFO    something else mentioning step=registered since_start_s=9.0 \
since_prev_s=9.0
"""
JSON_LOG = (
    '{"ts": 1.0, "level": "info", "msg": "startup step registered", "node": "n2", '
    '"step": "registered", "since_start_s": 2.4, "since_prev_s": 1.0}\n'
    '{"ts": 1.1, "level": "info", "msg": "no step here"}\n'
    "not json {\n"
)


def test_both_log_formats_are_read_and_the_first_report_counts() -> None:
    assert daemonsteps.parse(TEXT_LOG) == {
        "settings_loaded": (0.8, 0.8),
        "registered": (1.6, 0.8),
    }
    assert daemonsteps.parse(JSON_LOG) == {"registered": (2.4, 1.0)}
    assert daemonsteps.parse("NVIDIA's daemon logs no step lines\n") == {}


def test_steps_are_summarised_over_the_daemons_in_the_daemons_order() -> None:
    summary = daemonsteps.summarize(
        [
            daemonsteps.parse(TEXT_LOG),
            daemonsteps.parse(JSON_LOG),
            {"registered": (4.0, 3.0), "imex_ready": (5.0, 1.0)},
        ]
    )
    assert list(summary) == ["settings_loaded", "registered", "imex_ready"]
    assert summary["registered"] == {
        "at_median": 2.4,
        "at_max": 4.0,
        "took_median": 1.0,
        "took_max": 3.0,
        "daemons": 3,
    }
    assert summary["settings_loaded"]["daemons"] == 1
    assert daemonsteps.summarize([{}, {}]) == {}
