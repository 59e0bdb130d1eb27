"""Supervise one child process (``nvidia-imex``): start, stream logs, reload, stop, restart on exit.

Contract (STYLE §2.4):

* Only :meth:`Supervisor.run`'s task spawns the child and awaits its exit — nothing polls. How
  a child is spawned, logged (with ``child=<name>``) and stopped is ``childproc``'s.
* An unexpected exit is restarted after a capped exponential backoff (with jitter). The attempt
  counter resets once a child has stayed up for ``healthy_after`` seconds, so a child that crashes
  once a day restarts quickly, and a crash loop slows down. Each restart is counted and reported
  through ``on_restart`` (metrics, Kubernetes Events); a failing hook never stops supervision.
* :meth:`Supervisor.reload` sends SIGUSR1 and never restarts.
* :meth:`Supervisor.stop` is SIGTERM, a wait bounded by ``stop_grace``, then SIGKILL and a wait.
  Cancelling :meth:`Supervisor.run` stops the child the same way, so no child outlives us.
* A failure to spawn on :meth:`Supervisor.start` is returned to that caller; a failure to respawn
  after a crash is fatal (raised from :meth:`Supervisor.run`), as upstream treats it.
* With ``parent_death_signal`` set, no child outlives us even when we are killed (``childproc``).
* The child is started by a ``launcher.Launcher`` (a process by default; the simulator's
  virtual nodes pass an in-process one): supervision is the same either way.
* ``on_output`` is called with each line the child prints, after it is logged (the own IMEX
  check's cue, the peer watch's; the daemon also reads IMEX's refusal to start from it,
  ``daemon.session``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from compute_domains.containers import procs
from compute_domains.daemon import childproc, launcher
from compute_domains.infra import backoff, errors

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SupervisorSettings:
    """How one child process is supervised."""

    name: str = "imex"
    """Short child name, bound to every log record as ``child``."""

    stop_grace: float = 10.0
    """Seconds between SIGTERM and SIGKILL when stopping the child."""

    healthy_after: float = 30.0
    """Seconds a child must stay up before its restart backoff starts again from the beginning."""

    backoff: backoff.Backoff = dataclasses.field(
        default_factory=lambda: backoff.Backoff(initial=0.5, maximum=30.0)
    )
    """Delay policy between unexpected exits and restarts."""

    drain_timeout: float = 2.0
    """Seconds to wait for the child's output pipes to close after it exited."""

    parent_death_signal: int | None = None
    """Signal the kernel sends the child if this process dies first (Linux ``PR_SET_PDEATHSIG``);
    None leaves the child alone."""


@dataclasses.dataclass(frozen=True, slots=True)
class ChildExit:
    """One unexpected child exit, as reported to ``on_restart``."""

    returncode: int
    """Exit status; negative for death by signal."""

    uptime: float
    """Seconds the child was up."""

    restart_delay: float
    """Seconds until the restart."""

    restarts: int
    """Restarts so far, including this one."""


class Supervisor:
    """Owns one child process; see the module docstring for the contract."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        settings: SupervisorSettings,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        rng: random.Random | None = None,
        on_restart: Callable[[ChildExit], None] | None = None,
        on_output: Callable[[str], None] | None = None,
        log: logging.Logger | None = None,
        programs: launcher.Launcher | None = None,
    ) -> None:
        self._argv = list(argv)
        self._programs = programs if programs is not None else launcher.ProcessLauncher()
        self._settings = settings
        self._env = dict(env) if env is not None else None
        self._cwd = cwd
        self._rng = rng if rng is not None else random.Random()
        self._on_restart = on_restart
        self._on_output = on_output
        self._log = logging.LoggerAdapter(log or logger, {"child": settings.name})
        self._proc: launcher.Child | None = None
        self._wanted = asyncio.Event()
        self._unwanted = asyncio.Event()
        self._unwanted.set()
        self._start_waiters: list[asyncio.Future[bool]] = []
        self._attempt = 0
        self.restarts = 0
        """Unexpected exits that led to a restart, over this supervisor's life."""

    @property
    def running(self) -> bool:
        """Whether a child process exists and has not exited."""
        return self._proc is not None and self._proc.returncode is None

    @property
    def pid(self) -> int | None:
        """The running child's pid, or None."""
        return self._proc.pid if self.running and self._proc is not None else None

    async def run(self) -> None:
        """Supervise until cancelled; stops the child on the way out.

        Raises:
            TemporaryError: The child could not be respawned after an unexpected exit.
        """
        loop = asyncio.get_running_loop()
        try:
            while True:
                await self._wanted.wait()
                try:
                    proc = await self._spawn()
                except OSError as err:
                    waiters = self._take_waiters()
                    if not waiters:
                        raise errors.TemporaryError(
                            f"restarting child {self._settings.name} failed: {err}"
                        ) from err
                    self._set_unwanted()
                    for fut in waiters:
                        fut.set_exception(err)
                    continue
                if not self._wanted.is_set():
                    await self._terminate()  # stop() raced the spawn
                    continue
                for fut in self._take_waiters():
                    fut.set_result(True)
                started = loop.time()
                returncode = await childproc.pump_until_exit(
                    proc,
                    name=self._settings.name,
                    log=self._log,
                    drain_timeout=self._settings.drain_timeout,
                    on_line=self._on_output,
                )
                if not self._wanted.is_set():
                    continue  # stopped on purpose; stop() reports the exit
                await self._after_crash(returncode, loop.time() - started)
        finally:
            await self._terminate()
            for fut in self._start_waiters:
                fut.cancel()

    async def start(self) -> bool:
        """Ensure the child runs; True if this call (re)started it, False if it was running.

        Needs :meth:`run` to be running. If the child is waiting out a restart backoff, this
        returns once it has been restarted.

        Raises:
            OSError: The child could not be spawned (for example a missing executable).
        """
        if self.running:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._start_waiters.append(fut)
        self._unwanted.clear()
        self._wanted.set()
        return await fut

    def reload(self) -> bool:
        """Send SIGUSR1 to the running child; False (and nothing sent) if none is running."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return False
        try:
            proc.send_signal(signal.SIGUSR1)
        except ProcessLookupError:
            return False
        self._log.info("sent SIGUSR1 to pid %d", proc.pid)
        return True

    async def stop(self) -> int | None:
        """Stop the child (SIGTERM, bounded wait, SIGKILL); its exit status, None if none ran."""
        self._set_unwanted()
        for fut in self._start_waiters:
            fut.cancel()
        self._start_waiters.clear()
        return await self._terminate()

    async def restart(self) -> bool:
        """Stop the child if it runs, then start it again."""
        await self.stop()
        return await self.start()

    def _take_waiters(self) -> list[asyncio.Future[bool]]:
        waiters = [fut for fut in self._start_waiters if not fut.done()]
        self._start_waiters.clear()
        return waiters

    def _set_unwanted(self) -> None:
        self._wanted.clear()
        self._unwanted.set()

    async def _spawn(self) -> launcher.Child:
        proc = await self._programs.spawn(
            self._argv,
            env=self._env,
            cwd=self._cwd,
            parent_death_signal=self._settings.parent_death_signal,
        )
        self._proc = proc
        self._log.info("started %s (pid %d)", self._argv[0], proc.pid)
        return proc

    async def _after_crash(self, returncode: int, uptime: float) -> None:
        if uptime >= self._settings.healthy_after:
            self._attempt = 0
        delay = self._settings.backoff.delay(self._attempt, self._rng)
        self._attempt += 1
        self.restarts += 1
        self._log.warning(
            "child exited unexpectedly with status %d after %.1fs; restart #%d in %.2fs",
            returncode,
            uptime,
            self.restarts,
            delay,
        )
        if self._on_restart is not None:
            try:
                self._on_restart(ChildExit(returncode, uptime, delay, self.restarts))
            except Exception:
                # Not fatal: metrics and Events are reporting only; supervision must go on.
                self._log.warning("restart hook failed", exc_info=True)
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
        # arrives as the event is set, and run() would then never stop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._unwanted.wait()

    async def _terminate(self) -> int | None:
        proc = self._proc
        if proc is None:
            return None
        return await procs.terminate(proc, grace=self._settings.stop_grace, log=self._log)
