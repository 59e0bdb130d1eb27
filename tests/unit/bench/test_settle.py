"""bench.settle: the wait before an apply ends when the machine is quiet or steady, and not later
than its limit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from compute_domains.bench import settle


class Machine:
    """A clock and /proc/stat-like readings whose busy share per window follows ``shares``."""

    def __init__(self, shares: list[float], window: float = 3.0) -> None:
        self.shares = list(shares)
        self.now = 0.0
        self.busy = 0
        self.total = 0
        self.window = window
        self.windows = 0

    def read(self) -> settle.CpuTimes:
        return self.busy, self.total

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        share = self.shares[min(self.windows, len(self.shares) - 1)]
        self.windows += 1
        self.total += 1000
        self.busy += int(share * 1000)

    def clock(self) -> float:
        return self.now


def _wait(machine: Machine, **kw: float) -> settle.Settled:
    settings = settle.SettleSettings(**kw)
    return asyncio.run(settle.wait(settings, machine.read, machine.sleep, machine.clock))


def test_a_draining_install_is_waited_out_until_the_machine_is_quiet() -> None:
    machine = Machine([0.95, 0.8, 0.6, 0.4, 0.2, 0.2])
    got = _wait(machine)
    assert got.why == "quiet"
    assert machine.windows == 5
    assert got.waited_s == pytest.approx(15.0)
    assert got.busy == pytest.approx(0.2)


def test_a_busy_machine_that_stopped_falling_is_steady_and_not_waited_on() -> None:
    # Other work keeps the machine at ~70 %: the wait ends once the share stops falling.
    machine = Machine([0.9, 0.72, 0.70, 0.71])
    got = _wait(machine)
    assert got.why == "steady"
    assert machine.windows == 3
    assert got.busy == pytest.approx(0.70)


def test_the_wait_ends_at_its_limit_while_the_machine_still_drains() -> None:
    machine = Machine([0.99 * 0.8**k for k in range(20)])
    got = _wait(machine, max_s=9.0)
    assert got.why == "time limit"
    assert got.waited_s == pytest.approx(9.0)
    assert machine.windows == 3


def test_no_limit_means_no_wait() -> None:
    machine = Machine([0.9])
    got = _wait(machine, max_s=0.0)
    assert (got.waited_s, got.busy, got.why) == (0.0, None, "not waited")
    assert machine.windows == 0


def test_the_aggregate_cpu_line_counts_idle_and_iowait_as_not_busy(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 5 50 800 40 3 2 0 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    busy, total = settle.read_cpu_times(stat)
    assert total == 1000
    assert busy == 160
    assert settle.busy_share((0, 0), (busy, total)) == pytest.approx(0.16)
    assert settle.busy_share((5, 10), (5, 10)) == 0.0
