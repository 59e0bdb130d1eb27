"""Grouping the runs of alternating rounds by driver and size."""

from __future__ import annotations

from pathlib import Path

from compute_domains.bench import drivers, formation, roundresults


def _run(n: int, t: float) -> formation.Run:
    return formation.Run(
        n=n,
        daemons_ready_s=t,
        workloads_running_s=t + 1,
        cd_ready_s=t + 0.5,
        entries_ready_s=t,
        last_daemon_to_cd_ready_s=0.5,
        teardown_s=2.0,
        writes_formation=100,
        writes_formation_no_leases=60,
        writes_teardown=50,
        requests_formation={},
        load_start=1.0,
        load_end=2.0,
    )


def _round(
    index: int, driver: str, runs: list[tuple[formation.Run, dict[str, float]]]
) -> roundresults.RoundResult:
    result = roundresults.RoundResult(
        index=index, repeat=index // 2, driver=driver, sim_up_s=30.0, load_before_sim=0.5
    )
    result.runs = runs
    return result


CPU_A = {"driver controller": 1.0, "IMEX daemons": 2.0, "kube-apiserver": 3.0}
CPU_B = {"driver controller": 0.5, "IMEX daemons": 1.0, "kube-apiserver": 2.0}


def _rounds() -> list[roundresults.RoundResult]:
    return [
        _round(0, "ours", [(_run(4, 6.0), CPU_A), (_run(18, 40.0), CPU_A)]),
        _round(1, "nvidia", [(_run(4, 5.0), CPU_B), (_run(18, 16.0), CPU_B)]),
        _round(2, "ours", [(_run(4, 8.0), CPU_B)]),  # N=18 did not form in this round
        _round(3, "nvidia", [(_run(4, 4.0), CPU_A), (_run(18, 17.0), CPU_A)]),
    ]


def test_summaries_per_driver_and_size_in_the_given_order() -> None:
    out = roundresults.summarize(_rounds(), ["ours", "nvidia"])
    assert [(s["driver"], s["n"], s["repeats"]) for s in out] == [
        ("ours", 4, 2),
        ("ours", 18, 1),
        ("nvidia", 4, 2),
        ("nvidia", 18, 2),
    ]
    ours4 = out[0]
    assert ours4["cd_ready_s"] == {"median": 7.5, "min": 6.5, "max": 8.5}
    assert [r["round"] for r in ours4["runs"]] == [0, 2]
    assert ours4["runs"][0]["load_start"] == 1.0
    # Totals are per run (6.0 and 3.5 s), then the median: not a sum of per-kind medians.
    assert ours4["cpu_total_s"] == {"median": 4.75, "min": 3.5, "max": 6.0}
    assert ours4["cpu_driver_s"] == {"median": 2.25, "min": 1.5, "max": 3.0}
    assert ours4["cpu_s"]["kube-apiserver"] == 2.5


def test_document_keeps_the_rounds_in_run_order_and_collects_failures(tmp_path: Path) -> None:
    done = _rounds()
    done[2].failures.append("round 3 (ours) N=18: not formed in 600s")
    specs = [
        drivers.DriverSpec(name=n, chart=tmp_path, release=n, namespace=n)
        for n in ("ours", "nvidia")
    ]
    doc = roundresults.document(specs, done)
    assert [d["name"] for d in doc["drivers"]] == ["ours", "nvidia"]
    assert [(r["index"], r["driver"]) for r in doc["rounds"]] == [
        (0, "ours"),
        (1, "nvidia"),
        (2, "ours"),
        (3, "nvidia"),
    ]
    assert doc["rounds"][2]["runs"] == [{"n": 4, "load_start": 1.0, "load_end": 2.0}]
    assert doc["failures"] == ["round 3 (ours) N=18: not formed in 600s"]
