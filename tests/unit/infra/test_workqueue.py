"""The keyed, de-duplicating work queue: coalescing, one worker per key, delays, backoff."""

from __future__ import annotations

import asyncio

import pytest

from compute_domains.infra import backoff, workqueue

NO_JITTER = backoff.Backoff(initial=0.01, maximum=0.04, jitter=0.0)


def _queue(clock: list[float] | None = None) -> workqueue.WorkQueue[str]:
    if clock is None:
        return workqueue.WorkQueue(retry_backoff=NO_JITTER)
    return workqueue.WorkQueue(retry_backoff=NO_JITTER, clock=lambda: clock[0])


async def _drain(q: workqueue.WorkQueue[str]) -> list[str]:
    out = []
    while True:
        try:
            key = await asyncio.wait_for(q.get(), 0.05)
        except TimeoutError:
            return out
        out.append(key)
        q.done(key)


async def test_a_burst_of_adds_is_one_item() -> None:
    q = _queue()
    for _ in range(100):
        q.add("cd-1")
    q.add("cd-2")
    assert len(q) == 2
    assert await _drain(q) == ["cd-1", "cd-2"]


async def test_a_key_added_while_processing_runs_again_after_done() -> None:
    q = _queue()
    q.add("cd-1")
    key = await q.get()
    q.add("cd-1")
    q.add("cd-1")
    assert await _drain(q) == []  # not handed to a second worker while held
    q.done(key)
    assert await _drain(q) == ["cd-1"]


async def test_two_workers_never_hold_the_same_key() -> None:
    q = _queue()
    held: set[str] = set()
    seen: list[str] = []

    async def worker() -> None:
        while True:
            key = await q.get()
            assert key not in held
            held.add(key)
            seen.append(key)
            await asyncio.sleep(0.001)
            held.discard(key)
            q.done(key)

    workers = [asyncio.create_task(worker()) for _ in range(4)]
    for i in range(50):
        q.add(f"cd-{i % 5}")
        await asyncio.sleep(0)
    while len(q) or q.processing:
        await asyncio.sleep(0.005)
    for w in workers:
        w.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    assert set(seen) == {f"cd-{i}" for i in range(5)}


async def test_delayed_add_waits_and_the_earliest_due_time_wins() -> None:
    q = _queue()
    q.add("late", 10.0)
    q.add("soon", 0.02)
    q.add("late", 0.01)  # moves "late" earlier
    q.add("soon", 5.0)  # never postpones
    started = asyncio.get_running_loop().time()
    first = await asyncio.wait_for(q.get(), 1.0)
    second_task = asyncio.create_task(q.get())
    second = await asyncio.wait_for(second_task, 1.0)
    assert {first, second} == {"late", "soon"}
    assert asyncio.get_running_loop().time() - started < 1.0


async def test_an_immediate_add_overrides_a_pending_delay() -> None:
    q = _queue()
    q.add("cd", 30.0)
    q.add("cd")
    assert await asyncio.wait_for(q.get(), 1.0) == "cd"


async def test_delays_follow_an_injected_clock() -> None:
    clock = [100.0]
    q = _queue(clock)
    q.add("cd", 5.0)
    assert await _drain(q) == []
    clock[0] = 105.0
    assert await _drain(q) == ["cd"]


@pytest.mark.parametrize(
    ("failures", "expected"), [(1, 0.01), (2, 0.02), (3, 0.04), (6, 0.04)], ids=str
)
def test_retry_backs_off_per_key_until_forgotten(failures: int, expected: float) -> None:
    q = _queue([0.0])
    delays = [q.retry("cd") for _ in range(failures)]
    assert delays[-1] == pytest.approx(expected)
    assert q.failures("cd") == failures
    assert q.retry("other") == pytest.approx(0.01)
    q.forget("cd")
    assert q.failures("cd") == 0
    assert q.retry("cd") == pytest.approx(0.01)


def test_retry_honours_a_longer_requested_delay() -> None:
    q = _queue([0.0])
    assert q.retry("cd", 2.5) == 2.5
    assert q.retry("cd", 0.0) == pytest.approx(0.02)


async def test_a_cancel_that_races_a_wakeup_still_cancels_the_waiter() -> None:
    """A worker cancelled in the same loop step that a key arrives must stop, not take the key.

    Python 3.11's ``asyncio.wait_for`` returns the inner result and swallows the cancellation
    when both land together; a worker loop then waited for the next key forever (the
    controller's stop hung in CI at teardown of test_cross_held_nodes_both_losers_are_replaced).
    """
    queue = _queue()
    queue.add("cd-later", 60)  # a delayed key, so the getter waits with a timeout
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)  # the getter now waits for a key
    await asyncio.sleep(0)
    queue.add("cd-1")
    getter.cancel()
    done, _ = await asyncio.wait({getter}, timeout=5)
    assert done, "the cancelled getter did not end"
    assert getter.cancelled(), f"the cancelled getter took {getter.result()!r} instead of stopping"
    # The key was not handed out, so it is still there for the next worker.
    assert await asyncio.wait_for(queue.get(), 1) == "cd-1"
