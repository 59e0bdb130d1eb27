"""The one task guard: cancellation is a stop, an exception and a return are failures."""

from __future__ import annotations

import asyncio
import logging

import pytest

from compute_domains.infra import errors, tasks


async def test_cancellation_is_a_normal_stop(caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    with caplog.at_level(logging.DEBUG):
        task = asyncio.create_task(tasks.guard("watcher", forever))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.DEBUG, "task watcher stopped")
    ]


async def test_an_exception_is_logged_once_and_cancels_the_siblings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sibling_cancelled = asyncio.Event()

    async def sibling() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            sibling_cancelled.set()

    async def broken() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    with pytest.raises(ExceptionGroup) as caught:
        async with asyncio.TaskGroup() as tg:
            tasks.spawn(tg, "sibling", sibling)
            tasks.spawn(tg, "broken", broken())
    assert [type(e) for e in caught.value.exceptions] == [RuntimeError]
    assert sibling_cancelled.is_set()
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failures] == ["task broken failed"]
    assert failures[0].exc_info is not None


async def test_a_return_is_an_unexpected_end(caplog: pytest.LogCaptureFixture) -> None:
    async def quits() -> None:
        return None

    with pytest.raises(errors.TemporaryError, match="task server ended unexpectedly"):
        await tasks.guard("server", quits)
    assert [r.getMessage() for r in caplog.records] == ["task server ended unexpectedly"]
