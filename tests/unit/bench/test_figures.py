"""What the benchmark pictures show, taken from result documents (``bench.figures``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from compute_domains.bench import figures

RUNNING = [3.5, 1.25, 2.0, 2.75]
ENTRIES = [1.0, 0.5]
DAEMONS = [0.75, 0.5]


def _run(t: float, curves: bool = True) -> dict[str, Any]:
    run: dict[str, Any] = {
        "n": 4,
        "pods_per_node": 2,
        "milestones": {
            "workloads_scheduled": 0.25 + t,
            "daemons_created": 0.3 + t,
            "daemons": 0.75 + t,
            "cliques": 1.0 + t,
            "cd": 1.1 + t,
            "workloads_running": 3.5 + t,
        },
    }
    if curves:
        run["curves"] = {
            "workloads_running": [x + t for x in RUNNING],
            "entries_ready": [x + t for x in ENTRIES],
            "daemons_ready": [x + t for x in DAEMONS],
        }
    return run


DOC: dict[str, Any] = {
    "drivers": [
        {"name": "ours", "values": ["nvidiaDriverRoot=/x", "imex.agents=resident"]},
        {"name": "nvidia", "values": ["resources.gpus.enabled=false"]},
    ],
    "results": [
        {"driver": "ours", "n": 4, "nodes": 2, "runs": [_run(0.0), _run(2.0), _run(1.0)]},
        {"driver": "nvidia", "n": 4, "nodes": 2, "runs": [_run(0.5, curves=False)]},
        {"driver": "ours", "n": 8, "nodes": 4, "runs": [_run(0.0)]},
    ],
}


def _line(lines: list[figures.Line], label: str, series: str, run: int = 0) -> figures.Line:
    return next(x for x in lines if (x.label, x.series, x.run) == (label, series, run))


def test_the_curve_is_the_sorted_times_with_their_count() -> None:
    lines = figures.lines(figures.sources(DOC, 4))
    running = _line(lines, "ours (resident, per domain)", "workloads_running")
    assert running.xs == (1.25, 2.0, 2.75, 3.5)
    assert running.ys == (1, 2, 3, 4)
    assert running.total == 4 and not running.partial
    entries = _line(lines, "ours (resident, per domain)", "entries_ready", run=1)
    assert entries.xs == (2.5, 3.0) and entries.ys == (1, 2)
    assert entries.total == 2  # the domain's nodes: 4 pods, 2 per node


def test_a_run_without_per_pod_times_is_one_point_at_its_milestone() -> None:
    lines = figures.lines(figures.sources(DOC, 4))
    older = [x for x in lines if x.label == "nvidia"]
    assert {x.series for x in older} == {"workloads_running", "entries_ready", "daemons_ready"}
    running = _line(older, "nvidia", "workloads_running")
    assert running.partial and running.xs == (4.0,) and running.ys == (4,)
    assert _line(older, "nvidia", "entries_ready").xs == (1.5,)
    assert _line(older, "nvidia", "daemons_ready").ys == (2,)


def test_a_run_without_daemon_pods_has_no_daemon_line_or_bars() -> None:
    doc = copy.deepcopy(DOC)
    for result in doc["results"]:
        for run in result["runs"]:
            run["milestones"].pop("daemons_created")
            run.get("curves", {})["daemons_ready"] = []
    found = figures.sources(doc, 4)
    assert not [x for x in figures.lines(found) if x.series == "daemons_ready"]
    assert not [b for b in figures.bars(found) if b.phase.startswith("daemons")]
    assert [b for b in figures.bars(found) if b.phase == "cliques"]


def test_phase_bars_are_median_and_spread_over_the_runs() -> None:
    bars = figures.bars(figures.sources(DOC, 4))
    cd = next(b for b in bars if (b.label, b.phase) == ("ours (resident, per domain)", "cd"))
    assert (cd.median, cd.low, cd.high, cd.runs) == (pytest.approx(2.1), 1.1, 3.1, 3)
    ours = [b.phase for b in bars if b.label.startswith("ours")]
    assert ours == [p for p, _ in figures.PHASES if p in _run(0.0)["milestones"]]  # in order


@pytest.mark.parametrize(
    ("driver", "values", "expected"),
    [
        ("ours", [], "ours (per-CD DaemonSets)"),
        ("ours", ["imex.agents=resident"], "ours (resident, per domain)"),
        ("ours", ["imex.agents=resident", "imex.scope=perClique"], "ours (resident, per clique)"),
        (
            "perclique",
            ["imex.agents=resident", "imex.scope=perClique"],
            "perclique (resident, per clique)",
        ),
        ("nvidia", ["resources.gpus.enabled=false"], "nvidia"),
    ],
)
def test_labels_name_the_driver_and_our_imex_shape(
    driver: str, values: list[str], expected: str
) -> None:
    assert figures.label({"drivers": [{"name": driver, "values": values}]}, driver) == expected


def test_sources_and_sizes() -> None:
    assert figures.sizes(DOC) == [4, 8]
    assert [label for label, _ in figures.sources(DOC, 8)] == ["ours (resident, per domain)"]
