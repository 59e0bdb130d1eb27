"""Formation benchmark bookkeeping: runs, summaries, progress lines."""

from __future__ import annotations

import dataclasses

from compute_domains.bench import formation


def _run(t: float) -> formation.Run:
    return formation.Run(
        n=4,
        daemons_ready_s=t,
        workloads_running_s=t + 1,
        cd_ready_s=t + 0.5,
        entries_ready_s=t + 0.25,
        last_daemon_to_cd_ready_s=0.25,
        teardown_s=2 * t,
        writes_formation=100,
        writes_formation_no_leases=60,
        writes_teardown=50,
        requests_formation={},
    )


def test_summary_is_median_and_spread() -> None:
    summary = formation.summarize([_run(3.0), _run(1.0), _run(2.0)])
    assert summary["n"] == 4
    assert summary["repeats"] == 3
    assert summary["daemons_ready_s"] == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert summary["teardown_s"] == {"median": 4.0, "min": 2.0, "max": 6.0}
    assert summary["writes_formation_no_leases"]["median"] == 60.0


def _plain_run(t: float) -> formation.Run:
    return formation.Run(
        n=4,
        daemons_ready_s=None,
        workloads_running_s=t,
        cd_ready_s=None,
        entries_ready_s=None,
        last_daemon_to_cd_ready_s=None,
        teardown_s=t / 2,
        writes_formation=40,
        writes_formation_no_leases=30,
        writes_teardown=20,
        requests_formation={},
        workload="plain",
    )


def test_a_summary_without_a_domain_has_no_cd_timings_not_zero_ones() -> None:
    summary = formation.summarize([_plain_run(2.0), _plain_run(4.0)])
    assert summary["workload"] == "plain"
    assert summary["workloads_running_s"] == {"median": 3.0, "min": 2.0, "max": 4.0}
    for key in ("daemons_ready_s", "cd_ready_s", "entries_ready_s", "last_daemon_to_cd_ready_s"):
        assert summary[key] is None, key
    assert formation.summarize([_run(1.0)])["workload"] == "claims"


async def test_progress_is_printed_while_the_formation_runs_and_not_after() -> None:
    import asyncio

    lines: list[str] = []
    finish = asyncio.Event()

    async def forming() -> None:
        await finish.wait()

    def progress(line: str) -> None:
        lines.append(line)
        if len(lines) == 3:
            finish.set()  # the formation ends after the third line

    waiting = asyncio.create_task(forming())
    await formation.until_done(waiting, lambda: f"line {len(lines)}", progress, 0.01)
    assert lines == ["line 0", "line 1", "line 2"]
    assert waiting.done()


async def test_no_progress_without_a_printer() -> None:
    import asyncio

    async def forming() -> None:
        return None

    waiting = asyncio.create_task(forming())
    await formation.until_done(waiting, lambda: "never", None, 0.01)
    assert waiting.done()


def test_the_formed_line_names_the_pods_and_for_a_domain_the_cd_and_entries() -> None:
    marks = {"workloads": 141.23, "cd": 142.0, "cliques": 126.5, "daemons": 120.0}
    assert formation.formed_line(marks, domain=True) == (
        "formed: all pods Running at 141.2s, CD Ready at 142.0s, entries Ready at 126.5s"
    )
    assert formation.formed_line({"workloads": 2.04}, domain=False) == (
        "formed: all pods Running at 2.0s"
    )


def test_a_run_whose_teardown_did_not_end_keeps_its_formation_figures() -> None:
    unfinished = dataclasses.replace(
        _run(2.0), teardown_s=None, teardown_problem="teardown not reached: still there: x"
    )
    summary = formation.summarize([_run(1.0), unfinished])
    assert summary["workloads_running_s"] == {"median": 2.5, "min": 2.0, "max": 3.0}
    assert summary["teardown_s"] is None  # not a median of one side's figures
