"""Wait for the machine to settle before a formation's apply.

A round installs its driver and, once every driver pod is Ready, applies the workload. On a
small machine the install's own work (dozens of processes starting, their first syncs) is still
draining at that moment, so the first size of every round formed on a machine busier than the
next size's, and than any real cluster, where a driver is installed long before a job arrives.
Before each apply the bench now waits, at most ``max_s``, until the machine's CPU use over one
window is low (``quiet_busy``) or has stopped falling (no more than ``steady_drop`` below the
window before): what is left then is the cluster's steady state (a per-clique cluster's
IMEX checks, other sessions' work), which the wait cannot and should not remove. Every driver
gets the same rule; the run records how long it waited and how busy the machine was.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class SettleSettings:
    """How the wait decides; ``max_s`` 0 applies at once (the bench before this module)."""

    max_s: float = 60.0
    window_s: float = 3.0
    quiet_busy: float = 0.25
    """A window with at most this share of all cores busy is quiet."""
    steady_drop: float = 0.1
    """A window busier than ``quiet_busy`` that fell by less than this share of the window
    before is steady: the rest is the machine's steady state, not the install draining."""


@dataclasses.dataclass(frozen=True)
class Settled:
    """What a wait found: seconds waited and the last window's busy share (None: not waited)."""

    waited_s: float
    busy: float | None
    why: str


CpuTimes = tuple[int, int]
"""(busy, total) jiffies of all cores since boot."""


def read_cpu_times(stat: Path = Path("/proc/stat")) -> CpuTimes:
    """The machine's busy and total CPU time from the first (aggregate) line of /proc/stat;
    idle and iowait count as not busy."""
    fields = stat.read_text().split("\n", 1)[0].split()
    values = [int(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    total = sum(values[:8])  # guest times are already inside user and nice
    return total - idle, total


def busy_share(before: CpuTimes, after: CpuTimes) -> float:
    """Share of all cores busy between two readings (0 when no time passed)."""
    total = after[1] - before[1]
    return 0.0 if total <= 0 else max(0.0, min(1.0, (after[0] - before[0]) / total))


def verdict(previous: float | None, current: float, settings: SettleSettings) -> str | None:
    """Why the machine counts as settled after a window (None: wait another)."""
    if current <= settings.quiet_busy:
        return "quiet"
    if previous is not None and current >= previous * (1.0 - settings.steady_drop):
        return "steady"
    return None


async def wait(
    settings: SettleSettings,
    read: Callable[[], CpuTimes] = read_cpu_times,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Settled:
    """Wait window by window until ``verdict`` says settled, or ``max_s`` has passed."""
    if settings.max_s <= 0:
        return Settled(waited_s=0.0, busy=None, why="not waited")
    start = clock()
    previous: float | None = None
    last = read()
    while True:
        await sleep(settings.window_s)
        now = read()
        current = busy_share(last, now)
        why = verdict(previous, current, settings)
        waited = clock() - start
        if why is not None:
            return Settled(waited_s=waited, busy=current, why=why)
        if waited >= settings.max_s:
            return Settled(waited_s=waited, busy=current, why="time limit")
        previous, last = current, now
