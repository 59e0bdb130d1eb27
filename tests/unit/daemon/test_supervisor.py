"""The child-process supervisor, driven with small scripted children (python -c / sh -c)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from compute_domains.daemon import supervisor
from compute_domains.infra import backoff, errors

ECHO = """
import os, signal, sys, time
signal.signal(signal.SIGUSR1, lambda *_: print(f"usr1 {os.getpid()}", flush=True))
print(f"ready {os.getpid()}", flush=True)
print("[Jan 01 2026 00:00:00] [ERROR] [tid 1] something failed", file=sys.stderr, flush=True)
while True:
    time.sleep(0.05)
"""

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


class Lines(logging.Handler):
    """Collects log records; lets a test wait for a message."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []
        self._waiters: list[tuple[str, asyncio.Event]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        for text, event in self._waiters:
            if text in record.getMessage():
                event.set()

    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]

    async def wait_for(self, text: str, timeout: float = 10.0) -> logging.LogRecord:
        event = asyncio.Event()
        self._waiters.append((text, event))
        if not any(text in m for m in self.messages()):
            await asyncio.wait_for(event.wait(), timeout)
        return next(r for r in self.records if text in r.getMessage())


@pytest.fixture
def lines() -> Lines:
    return Lines()


@pytest.fixture
def log(lines: Lines) -> logging.Logger:
    logger = logging.getLogger(f"test.supervisor.{uuid.uuid4().hex}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(lines)
    return logger


def _settings(**overrides: object) -> supervisor.SupervisorSettings:
    values: dict[str, object] = {
        "stop_grace": 5.0,
        "healthy_after": 60.0,
        "backoff": backoff.Backoff(initial=0.05, maximum=0.2, jitter=0.0),
    }
    values.update(overrides)
    return supervisor.SupervisorSettings(**values)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def supervising(sup: supervisor.Supervisor) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(sup.run(), name="supervisor")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 15)


def _py(script: str) -> list[str]:
    return [sys.executable, "-c", script]


async def test_child_output_is_logged_line_by_line_with_the_child_key(
    log: logging.Logger, lines: Lines
) -> None:
    outputs: list[str] = []
    sup = supervisor.Supervisor(_py(ECHO), settings=_settings(), log=log, on_output=outputs.append)
    async with supervising(sup):
        assert await sup.start()
        assert not await sup.start()  # already running
        ready = await lines.wait_for("ready ")
        failed = await lines.wait_for("something failed")
        assert ready.levelno == logging.INFO and ready.child == "imex"
        assert failed.levelno == logging.ERROR and failed.child == "imex"
        # The own IMEX check's cue and the session check's input: each line, either stream.
        assert sorted(o.split()[0] for o in outputs) == ["[Jan", "ready"], outputs
        assert any(o.endswith("something failed") for o in outputs), outputs
        assert await sup.stop() == -signal.SIGTERM
        assert not sup.running and sup.restarts == 0


async def test_reload_sends_sigusr1_and_never_restarts(log: logging.Logger, lines: Lines) -> None:
    sup = supervisor.Supervisor(_py(ECHO), settings=_settings(), log=log)
    assert not sup.reload()  # nothing running yet
    async with supervising(sup):
        await sup.start()
        await lines.wait_for("ready ")
        pid = sup.pid
        assert sup.reload()
        await lines.wait_for(f"usr1 {pid}")
        assert sup.pid == pid and sup.restarts == 0


async def test_unexpected_exits_restart_with_capped_exponential_backoff(
    log: logging.Logger,
) -> None:
    exits: list[supervisor.ChildExit] = []
    done = asyncio.Event()

    def on_restart(info: supervisor.ChildExit) -> None:
        exits.append(info)
        if len(exits) == 5:
            done.set()

    sup = supervisor.Supervisor(
        ["sh", "-c", "exit 3"], settings=_settings(), log=log, on_restart=on_restart
    )
    async with supervising(sup):
        await sup.start()
        await asyncio.wait_for(done.wait(), 15)
        await sup.stop()
    assert [e.restart_delay for e in exits] == [0.05, 0.1, 0.2, 0.2, 0.2]
    assert {e.returncode for e in exits} == {3}
    assert [e.restarts for e in exits] == [1, 2, 3, 4, 5]
    assert sup.restarts == 5


async def test_backoff_starts_over_after_a_healthy_run(log: logging.Logger, tmp_path: Path) -> None:
    counter = tmp_path / "runs"
    script = (
        f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; "
        'if [ "$n" -eq 3 ]; then sleep 1; fi; exit 1'
    )
    exits: list[supervisor.ChildExit] = []
    done = asyncio.Event()

    def on_restart(info: supervisor.ChildExit) -> None:
        exits.append(info)
        if len(exits) == 4:
            done.set()

    settings = _settings(
        healthy_after=0.5, backoff=backoff.Backoff(initial=0.05, maximum=1.0, jitter=0.0)
    )
    sup = supervisor.Supervisor(
        ["sh", "-c", script], settings=settings, log=log, on_restart=on_restart
    )
    async with supervising(sup):
        await sup.start()
        await asyncio.wait_for(done.wait(), 15)
        await sup.stop()
    assert exits[2].uptime >= 0.5
    assert [e.restart_delay for e in exits] == [0.05, 0.1, 0.05, 0.1]


async def test_stop_escalates_from_sigterm_to_sigkill(log: logging.Logger, lines: Lines) -> None:
    sup = supervisor.Supervisor(_py(STUBBORN), settings=_settings(stop_grace=0.3), log=log)
    async with supervising(sup):
        await sup.start()
        await lines.wait_for("ready")
        pid = sup.pid
        assert pid is not None
        assert await sup.stop() == -signal.SIGKILL
        await lines.wait_for("ignored SIGTERM")
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert sup.restarts == 0


async def test_stop_during_backoff_prevents_the_restart(log: logging.Logger) -> None:
    exited = asyncio.Event()
    pause = 0.3
    settings = _settings(backoff=backoff.Backoff(initial=pause, maximum=pause, jitter=0.0))
    sup = supervisor.Supervisor(
        ["sh", "-c", "exit 2"], settings=settings, log=log, on_restart=lambda _: exited.set()
    )
    async with supervising(sup) as task:
        await sup.start()
        await asyncio.wait_for(exited.wait(), 10)
        loop = asyncio.get_running_loop()
        restart_due = loop.time() + pause
        assert await sup.stop() == 2
        # An absence: watched past the moment the cancelled restart was due.
        while loop.time() < restart_due + 0.2:
            assert not task.done() and not sup.running and sup.restarts == 1
            await asyncio.sleep(0.02)


async def test_a_failing_restart_hook_does_not_stop_supervision(
    log: logging.Logger, lines: Lines
) -> None:
    calls: list[int] = []

    def hook(info: supervisor.ChildExit) -> None:
        calls.append(info.restarts)
        raise RuntimeError("metrics backend down")

    sup = supervisor.Supervisor(
        ["sh", "-c", "exit 1"], settings=_settings(), log=log, on_restart=hook
    )
    async with supervising(sup):
        await sup.start()
        await lines.wait_for("restart #2")
        await sup.stop()
    assert calls[:2] == [1, 2]
    assert any("restart hook failed" in m for m in lines.messages())


async def test_a_spawn_failure_is_returned_to_the_starter(log: logging.Logger) -> None:
    sup = supervisor.Supervisor(["/nonexistent/nvidia-imex"], settings=_settings(), log=log)
    async with supervising(sup) as task:
        with pytest.raises(FileNotFoundError):
            await sup.start()
        assert not task.done() and not sup.running


async def test_cancelling_run_stops_the_child(log: logging.Logger, lines: Lines) -> None:
    sup = supervisor.Supervisor(_py(ECHO), settings=_settings(), log=log)
    async with supervising(sup):
        await sup.start()
        await lines.wait_for("ready ")
        pid = sup.pid
        assert pid is not None
    assert not sup.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_a_failing_respawn_is_fatal(log: logging.Logger, tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text('#!/bin/sh\nrm -f "$0"\nexit 1\n')
    tool.chmod(0o755)
    sup = supervisor.Supervisor([str(tool)], settings=_settings(), log=log)
    task = asyncio.create_task(sup.run())
    await sup.start()
    with pytest.raises(errors.TemporaryError, match="restarting child imex failed"):
        await asyncio.wait_for(task, 10)
