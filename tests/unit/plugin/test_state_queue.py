"""DeviceState under a node's concurrent prepares (NVIDIA's issue #816 shape: four workload pods
on one node, each with its own channel claim of one per-clique CD): the transactions queued
behind one take over its file lock and its view of the checkpoint instead of each taking the
lock and reading the file again, and what they write is all there afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compute_domains.api import sharedimex
from compute_domains.api.computedomain import ComputeDomain
from compute_domains.infra import errors, filelock
from compute_domains.plugin import checkpoint, checkpointfile, configs
from compute_domains.plugin import state as st
from tests.unit.plugin import fakes

CD_X = "xxxxxxxx-0000-4000-8000-00000000000x"
State = checkpoint.ClaimState


def _claim(uid: str, slot: int) -> configs.Claim:
    return fakes.claim(
        uid,
        [fakes.result(f"channel-{slot}")],
        [fakes.config_entry(fakes.channel_config(CD_X))],
    )


def _counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Count the calls of ``owner.name`` (still calling it)."""
    calls: list[int] = []
    real: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


class _HeldAttach(fakes.FakeShared):
    """``attach`` of the first claim waits for ``go``: its transaction holds the node."""

    def __init__(self, domains: fakes.FakeDomains) -> None:
        super().__init__(domains)
        self.attaching = asyncio.Event()
        self.go = asyncio.Event()

    async def attach(self, cd: ComputeDomain, channel: int) -> None:
        if not self.attaching.is_set():
            self.attaching.set()
            await self.go.wait()
        await super().attach(cd, channel)


async def _queued(s: st.DeviceState, n: int) -> None:
    """Return once ``n`` transactions wait behind the running one (each task gets the loop
    until its next suspension, which for a new prepare is the node's queue)."""
    while s.queued < n:
        await asyncio.sleep(0)


@pytest.fixture
def domains() -> fakes.FakeDomains:
    return fakes.FakeDomains(
        fakes.compute_domain(CD_X, name="x", scope=sharedimex.Scope.PER_CLIQUE.value)
    )


async def test_a_nodes_queued_prepares_take_the_lock_and_read_the_checkpoint_once(
    tmp_path: Path, domains: fakes.FakeDomains, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = _HeldAttach(domains)
    s = fakes.device_state(tmp_path, domains, shared=shared)
    loads = _counting(monkeypatch, checkpointfile, "load")
    locks = _counting(monkeypatch, filelock.FileLock, "acquire_async")
    first = asyncio.create_task(s.prepare(_claim("c0", 0), wait_s=5))
    await shared.attaching.wait()  # c0's first transaction holds the node
    rest = [asyncio.create_task(s.prepare(_claim(f"c{i}", i), wait_s=5)) for i in (1, 2, 3)]
    await _queued(s, 3)
    shared.go.set()
    prepared = await asyncio.gather(first, *rest)
    assert [p[0].device_name for p in prepared] == [f"channel-{i}" for i in range(4)]
    # Eight transactions (two per prepare), each but the first queued behind another: one lock
    # and one read in all (without the hand-over: eight of each, one after another).
    assert (len(locks), len(loads)) == (1, 1)
    on_disk = checkpointfile.load(s.checkpoint_path)
    assert on_disk is not None
    assert {uid: e.state for uid, e in on_disk.claims.items()} == {
        f"c{i}": State.PREPARE_COMPLETED for i in range(4)
    }, "every queued transaction's write is in the file"
    free = filelock.FileLock(s.checkpoint_path.parent / st.LOCK_FILE, timeout=0, owner="test")
    free.acquire()  # the last transaction let go: another process can have the node now
    free.release()


async def test_prepares_that_waited_together_complete_in_one_save(
    tmp_path: Path, domains: fakes.FakeDomains, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = fakes.FakeShared(domains)
    shared.ready = False
    s = fakes.device_state(tmp_path, domains, shared=shared)
    saves = _counting(monkeypatch, checkpointfile, "save")
    tasks = [asyncio.create_task(s.prepare(_claim(f"c{i}", i), wait_s=5)) for i in range(4)]
    while len(shared.waited_while_following) < 4:  # every prepare waits for the shared IMEX
        await asyncio.sleep(0)
    assert len(saves) == 4, "each prepare recorded its start"
    shared.make_ready()
    prepared = await asyncio.gather(*tasks)
    assert [p[0].device_name for p in prepared] == [f"channel-{i}" for i in range(4)]
    # The first to get the node completes all four: one thread writes their files, one save
    # records them (before: one transaction each, one after another).
    assert len(saves) == 5
    on_disk = checkpointfile.load(s.checkpoint_path)
    assert on_disk is not None
    assert all(e.state is State.PREPARE_COMPLETED for e in on_disk.claims.values())
    assert len(on_disk.claims) == 4


async def test_a_failed_transaction_lets_go_and_the_next_reads_the_file_again(
    tmp_path: Path, domains: fakes.FakeDomains, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = fakes.device_state(tmp_path, domains, shared=fakes.FakeShared(domains))
    loads = _counting(monkeypatch, checkpointfile, "load")
    inside, fail = asyncio.Event(), asyncio.Event()

    async def failing() -> None:
        async with s.transaction():
            inside.set()
            await fail.wait()
            raise errors.TemporaryError("failed")

    first = asyncio.create_task(failing())
    await inside.wait()
    waiter = asyncio.create_task(s.prepare(_claim("c1", 1), wait_s=5))
    await _queued(s, 1)
    fail.set()
    with pytest.raises(errors.TemporaryError):
        await first
    await waiter
    # The failed one's read; then the prepare's two transactions read again (nobody queued
    # behind them): its first would have taken over had the failed one handed over.
    assert len(loads) == 3


async def test_a_queued_transaction_cancelled_while_handed_the_lock_lets_it_go(
    tmp_path: Path, domains: fakes.FakeDomains
) -> None:
    s = fakes.device_state(tmp_path, domains, shared=fakes.FakeShared(domains))
    inside, done = asyncio.Event(), asyncio.Event()
    waiters: list[asyncio.Task[Any]] = []

    async def running() -> None:
        async with s.transaction():
            inside.set()
            await done.wait()
        # The hand-over has happened (the waiter is queued), the waiter has not run yet.
        waiters[0].cancel()

    first = asyncio.create_task(running())
    await inside.wait()
    waiters.append(asyncio.create_task(s.prepare(_claim("c1", 1), wait_s=5)))
    await _queued(s, 1)
    done.set()
    await first
    with pytest.raises(asyncio.CancelledError):
        await waiters[0]
    assert s.queued == 0
    free = filelock.FileLock(s.checkpoint_path.parent / st.LOCK_FILE, timeout=0, owner="test")
    free.acquire()  # nobody holds it: the one it was handed to is gone
    free.release()
