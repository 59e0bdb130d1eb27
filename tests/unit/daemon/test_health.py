"""The daemon's own IMEX check: when it runs, what it answers, how fresh the answer must be."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from compute_domains.daemon import health
from compute_domains.daemon.config import HealthSettings
from compute_domains.daemon.probe import CheckResult


class FakeCtl:
    """One ``nvidia-imex-ctl -q`` per call; each waits until the test answers it."""

    def __init__(self) -> None:
        self.calls = 0
        self._pending: asyncio.Queue[asyncio.Future[bool]] = asyncio.Queue()

    async def __call__(self) -> CheckResult:
        self.calls += 1
        fut = asyncio.get_running_loop().create_future()
        await self._pending.put(fut)
        ok = await fut
        return CheckResult(ok, "READY" if ok else "INITIALIZING")

    async def next_call(self) -> asyncio.Future[bool]:
        """The next check, once it runs (answer it by setting the result)."""
        return await self._pending.get()

    async def answer(self, ok: bool) -> None:
        """Wait for the next check to run, then answer it."""
        (await self.next_call()).set_result(ok)


class Verdicts:
    def __init__(self) -> None:
        self.seen: list[bool] = []
        self.changed = asyncio.Event()

    def __call__(self, ok: bool) -> None:
        self.seen.append(ok)
        self.changed.set()

    async def until(self, ok: bool) -> None:
        while self.seen[-1:] != [ok]:
            self.changed.clear()
            await self.changed.wait()


@contextlib.asynccontextmanager
async def running(h: health.ImexHealth) -> AsyncIterator[None]:
    task = asyncio.create_task(h.run())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _settings(**kw: float) -> HealthSettings:
    values = {"fast_interval": 0.01, "period": 0.01, "settle": 0.01, "timeout": 1.0}
    values.update(kw)
    return HealthSettings(**values)


async def test_nothing_runs_before_imex_started_and_ready_needs_a_pass() -> None:
    ctl, verdicts = FakeCtl(), Verdicts()
    h = health.ImexHealth(ctl, _settings(), on_change=verdicts)
    async with running(h):
        for _ in range(20):
            await asyncio.sleep(0)  # let the loop run: it must wait for IMEX
        assert ctl.calls == 0 and not h.ready() and not await h.answer()
        h.imex_started()
        await ctl.answer(False)
        await ctl.answer(True)
        await verdicts.until(True)
        assert h.ready() and await h.answer()
        await ctl.answer(False)  # IMEX stopped answering READY
        await verdicts.until(False)
        assert not h.ready() and not await h.answer()
    assert verdicts.seen == [True, False]


async def test_imex_output_brings_the_next_check_forward() -> None:
    ctl = FakeCtl()
    h = health.ImexHealth(ctl, _settings(fast_interval=3600.0))
    async with running(h):
        h.imex_started()
        h.imex_output()  # its start-up lines: check now, not in an hour
        await ctl.answer(False)
        h.imex_output()
        await ctl.answer(True)
        assert ctl.calls == 2


async def test_a_check_brought_forward_runs_within_settle_max_of_endless_output() -> None:
    """IMEX logs its peer links after it turned READY: a cue's check must not wait for quiet."""
    ctl = FakeCtl()
    h = health.ImexHealth(ctl, _settings(fast_interval=3600.0, settle=0.05, settle_max=0.2))
    stop = asyncio.Event()

    async def chatter() -> None:
        while not stop.is_set():  # a line every 10 ms: never 50 ms of quiet
            h.imex_output()
            await asyncio.sleep(0.01)

    async with running(h):
        h.imex_started()
        talk = asyncio.create_task(chatter())
        try:
            async with asyncio.timeout(5):  # not an hour (fast_interval), not forever
                check = await ctl.next_call()
        finally:
            stop.set()
            await talk
        check.set_result(True)
    assert ctl.calls == 1


async def test_output_during_a_passing_check_brings_no_second_check() -> None:
    ctl, verdicts = FakeCtl(), Verdicts()
    h = health.ImexHealth(ctl, _settings(fast_interval=3600.0, period=3600.0), on_change=verdicts)
    async with running(h):
        h.imex_started()
        h.imex_output()
        running_check = await ctl.next_call()
        h.imex_output()  # IMEX's last start-up lines, printed while the check runs
        running_check.set_result(True)
        await verdicts.until(True)
        for _ in range(50):
            await asyncio.sleep(0.001)  # longer than `settle`: a cue would have run a check
        assert ctl.calls == 1


async def test_output_during_a_failing_check_brings_the_next_one_forward() -> None:
    ctl = FakeCtl()
    h = health.ImexHealth(ctl, _settings(fast_interval=3600.0))
    async with running(h):
        h.imex_started()
        h.imex_output()
        running_check = await ctl.next_call()
        h.imex_output()
        running_check.set_result(False)
        await ctl.answer(True)  # not an hour later
        assert ctl.calls == 2


async def test_an_imex_exit_is_not_ready_at_once_and_checked_again() -> None:
    ctl, verdicts = FakeCtl(), Verdicts()
    h = health.ImexHealth(ctl, _settings(period=3600.0), on_change=verdicts)
    async with running(h):
        h.imex_started()
        await ctl.answer(True)
        await verdicts.until(True)
        h.imex_exited()
        assert verdicts.seen == [True, False] and not h.ready()
        await ctl.answer(True)  # checked again without waiting an hour
        await verdicts.until(True)


async def test_an_answer_that_may_predate_an_exit_does_not_count() -> None:
    ctl, verdicts = FakeCtl(), Verdicts()
    h = health.ImexHealth(ctl, _settings(), on_change=verdicts)
    async with running(h):
        h.imex_started()
        running_check = await ctl.next_call()
        h.imex_exited()  # while the ctl still runs
        running_check.set_result(True)
        after_exit = await ctl.next_call()
        assert not h.ok and verdicts.seen == []
        after_exit.set_result(True)  # the next check, after the exit, counts
        await verdicts.until(True)


async def test_a_result_older_than_stale_after_fails_the_probe() -> None:
    now = [0.0]
    ctl, results = FakeCtl(), Verdicts()
    s = _settings(period=3600.0)
    h = health.ImexHealth(ctl, s, on_result=results, clock=lambda: now[0])
    async with running(h):
        h.imex_started()
        await ctl.answer(True)
        await results.until(True)
        now[0] = s.stale_after
        assert h.ready()
        now[0] = s.stale_after + 0.1  # the loop stopped renewing it
        assert h.ok and not h.ready() and not await h.answer()
    assert s.stale_after == pytest.approx(s.period + s.timeout + 2.0)


async def test_starting_lasts_until_the_first_pass_or_the_first_exit() -> None:
    # A resident agent's /readyz does not fail for a start under way (agent.app), only for an
    # IMEX that passed and fails now, or exited.
    ctl, verdicts = FakeCtl(), Verdicts()
    h = health.ImexHealth(ctl, _settings(), on_change=verdicts)
    assert h.starting
    async with running(h):
        h.imex_started()
        await ctl.answer(False)
        assert h.starting  # a failed check of a starting IMEX is still its start
        await ctl.answer(True)
        await verdicts.until(True)
        assert not h.starting
        await ctl.answer(False)
        await verdicts.until(False)
        assert not h.starting  # passed once: a failing check now is a failing IMEX
    exited = health.ImexHealth(FakeCtl(), _settings())
    exited.imex_started()
    exited.imex_exited()  # e.g. NV_ERR_IN_USE: it never started
    assert not exited.starting
