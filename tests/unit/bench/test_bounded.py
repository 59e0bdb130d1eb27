"""bench.bounded.gather: at most ``limit`` at once, results in order, None past the timeout."""

from __future__ import annotations

import asyncio

import pytest

from compute_domains.bench import bounded


async def test_never_more_than_limit_run_at_once_and_results_keep_the_order() -> None:
    running = 0
    most = 0
    release = asyncio.Event()

    async def one(item: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await release.wait()
        running -= 1
        return item * 10

    task = asyncio.create_task(bounded.gather(one, list(range(20)), limit=4, timeout=30))
    while running < 4:
        await asyncio.sleep(0)
    for _ in range(50):  # give any fifth a chance to start, were the gate missing
        await asyncio.sleep(0)
    assert running == 4
    release.set()
    assert await task == [i * 10 for i in range(20)]
    assert most == 4


async def test_what_did_not_finish_in_time_is_none_and_cancelled() -> None:
    cancelled: list[int] = []
    never = asyncio.Event()

    async def one(item: int) -> int:
        if item % 2:
            try:
                await never.wait()
            except asyncio.CancelledError:
                cancelled.append(item)
                raise
        return item

    got = await bounded.gather(one, [0, 1, 2, 3], limit=4, timeout=0.05)
    assert got == [0, None, 2, None]
    assert sorted(cancelled) == [1, 3]


async def test_an_items_failure_propagates() -> None:
    async def one(item: int) -> int:
        if item == 2:
            raise RuntimeError("boom")
        return item

    with pytest.raises(RuntimeError, match="boom"):
        await bounded.gather(one, [1, 2, 3], limit=2, timeout=5)


async def test_limit_below_one_is_refused() -> None:
    async def one(item: int) -> int:
        return item

    with pytest.raises(ValueError, match="at least 1"):
        await bounded.gather(one, [1], limit=0, timeout=1)


async def test_of_several_failures_the_first_in_the_items_order_is_raised() -> None:
    async def one(item: int) -> int:
        await asyncio.sleep(0.05 if item == 0 else 0)  # the first item fails last
        if item == 2:
            return item
        raise RuntimeError(f"item {item}")

    with pytest.raises(RuntimeError, match="item 0"):
        await bounded.gather(one, [0, 1, 2], limit=3, timeout=5)
