"""The garbage collector of a node host: rarer full collections, and what they cost, logged.

A node host (``sim.hosts``) is one Python process serving hundreds of virtual nodes: their
kubelets, plugins, agents and IMEX stand-ins, and the caches of their objects. It holds
millions of objects and creates many that live (each decoded pod, each connection's state).
CPython's cyclic collector runs a young collection every 700 net allocations and a full one,
over every tracked object, whenever the survivors since the last reach a quarter of the old
ones: in such a process the full collections are long (0.16 s for 1.4 million objects on the
2-core machine) and frequent, and a profile shows their time under whatever allocated when
they struck. On the 16-core machine at 4,608 nodes py-spy put 18 to 28 % of a node host's busy
samples on asyncio's ``create_future``, 22 % on the regular-expression cache's key tuple and
17 % on argparse's ``take_action`` (issue 28, sessions 16 and 17): allocation sites, not work.

:func:`install` freezes what exists once the host is built (modules, classes, functions: never
garbage), raises the thresholds so young collections are rarer and full ones much rarer, and
times every collection; :func:`report` logs, once a minute when there were any, how many ran
and how long they took. Memory is still freed by reference counting as it is now; only cycles
wait longer to be found. The real nodes' processes (one plugin or agent per node) keep
CPython's defaults: this is for the simulator's many-nodes-in-one-process hosts.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any

THRESHOLDS = (50_000, 20, 100)
"""Young collection every 50,000 net allocations; the middle one every 20 of those; a full one
considered every 100 middle ones (CPython's defaults: 700, 10, 10)."""

logger = logging.getLogger(__name__)


class Timings:
    """Collections and their seconds, per generation, since :func:`install`."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started: float | None = None

    def callback(self, phase: str, info: dict[str, Any]) -> None:
        """``gc.callbacks`` entry: time each collection."""
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            generation = int(info["generation"])
            self.count[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._started
            self._started = None

    def snapshot(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Collections and seconds so far, per generation."""
        return tuple(self.count), tuple(self.seconds)


def install(thresholds: tuple[int, int, int] = THRESHOLDS) -> Timings:
    """Apply this process's collector policy (see the module docstring); the timings it keeps."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    timings = Timings()
    gc.callbacks.append(timings.callback)
    return timings


def describe(
    before: tuple[tuple[int, ...], tuple[float, ...]],
    after: tuple[tuple[int, ...], tuple[float, ...]],
) -> str | None:
    """One line for the collections between two snapshots (None: there were none)."""
    counts = [a - b for a, b in zip(after[0], before[0], strict=True)]
    seconds = [a - b for a, b in zip(after[1], before[1], strict=True)]
    if not any(counts):
        return None
    parts = [
        f"generation {g}: {c} in {s:.2f}s"
        for g, (c, s) in enumerate(zip(counts, seconds, strict=True))
        if c
    ]
    return "garbage collections " + ", ".join(parts)


async def report(timings: Timings, every: float = 60.0) -> None:
    """Log the collections of each ``every`` seconds that had any, until cancelled."""
    last = timings.snapshot()
    while True:
        await asyncio.sleep(every)
        now = timings.snapshot()
        line = describe(last, now)
        if line is not None:
            logger.info("%s", line)
        last = now
