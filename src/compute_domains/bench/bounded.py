"""Read many pods' logs after a formation without flooding the API server or waiting forever.

After a formation the benchmark reads every workload pod's log (its channel) and every daemon's
(its start-up steps). At 4,608 nodes that was 4,608 + 4,608 log requests at once, each through
the API server to a kubelet, on a machine still busy with the formation: the run spent more
than seven minutes there and never wrote its result file (issue 28, 16-core machine, session
17). :func:`gather` runs at most ``limit`` of them at a time and stops waiting after
``timeout`` seconds, keeping what finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


async def gather(
    one: Callable[[T], Awaitable[R]], items: Sequence[T], *, limit: int, timeout: float
) -> list[R | None]:
    """``one(item)`` for every item, at most ``limit`` running at once; each result in the
    items' order, None for an item not finished within ``timeout`` seconds of the start (those
    still running are cancelled). An exception of ``one`` propagates."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    gate = asyncio.Semaphore(limit)
    results: list[R | None] = [None] * len(items)

    async def run(index: int, item: T) -> None:
        async with gate:
            results[index] = await one(item)

    tasks = [asyncio.create_task(run(i, item)) for i, item in enumerate(items)]
    if not tasks:
        return results
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    # Every failure is retrieved (none is left to the loop's "never retrieved" log); the
    # first, in the items' order, is the caller's to see.
    failures = [task.exception() for task in tasks if task in done]
    first = next((f for f in failures if f is not None), None)
    if first is not None:
        raise first
    return results
