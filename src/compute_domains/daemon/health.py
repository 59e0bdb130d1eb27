"""The daemon answers its own probes: its IMEX check, run by itself, and the answer it serves.

The kubelet's probes of the daemon container are ``httpGet`` requests to ``/readyz`` on the pod
IP (the DaemonSet's), answered from :meth:`ImexHealth.ready`, so a probe starts no process. What
Ready means is unchanged: the answer is the result of the daemon's own check, the same check
``cdctl daemon check`` runs (``nvidia-imex-ctl -q`` prints exactly ``READY``), run by this daemon:

* not before IMEX was started (until then: not ready, and no process is started to say so);
* then every ``fast_interval`` seconds until it passes, and sooner when IMEX prints a line (its
  start-up lines come just before it turns READY), after ``settle`` seconds of quiet but no
  later than ``settle_max`` after the burst's first line (IMEX goes on printing its peer links
  once READY); lines printed while a check runs that then passes bring nothing forward;
* then every ``period`` seconds, back to the fast pace as soon as one fails;
* an IMEX exit (the supervisor's restart hook) makes it not ready at once.

:attr:`ImexHealth.starting` tells a start still under way (no check passed, no exit yet) from
an IMEX that failed: a resident agent's ``/readyz`` does not fail for the former (``agent.app``).

A READY result passes the probe only while fresh (younger than ``stale_after``): a check loop
that stopped renewing it fails the probe rather than keep an old answer. Without a clique ID
there is no IMEX and the answer is always yes (as ``cdctl daemon check`` says). Every change is
logged and passed to ``on_change`` (our clique entry's readiness follows it, see
``readiness``); the first pass marks the ``imex_ready`` step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from compute_domains.daemon import probe
from compute_domains.daemon.config import HealthSettings

logger = logging.getLogger(__name__)

Check = Callable[[], Awaitable[probe.CheckResult]]


class ImexHealth:
    """The daemon's own view of its IMEX service (see the module docstring).

    Args:
        check: one run of the IMEX check (``probe.check`` with our settings).
        settings: pace and freshness.
        on_change: called with the new verdict when it changes (must not block).
        on_result: called after every check with its verdict (metrics).
        clock: monotonic seconds (the loop's time by default).
    """

    def __init__(
        self,
        check: Check,
        settings: HealthSettings,
        *,
        on_change: Callable[[bool], None] | None = None,
        on_result: Callable[[bool], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._check = check
        self._s = settings
        self._on_change = on_change
        self._on_result = on_result
        self._clock = clock
        self._started = asyncio.Event()
        self._wake = asyncio.Event()
        self._ok = False
        self._passed = False
        self._exits = 0
        self._at: float | None = None
        self._why = "IMEX not started yet"

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    @property
    def ok(self) -> bool:
        """The latest verdict (freshness aside)."""
        return self._ok

    @property
    def starting(self) -> bool:
        """IMEX has neither passed a check nor exited yet: its first start is under way (or
        not begun)."""
        return not self._passed and self._exits == 0

    def ready(self) -> bool:
        """Whether the probe passes now: the latest check saw READY, and not too long ago."""
        return self._ok and self._at is not None and self._now() - self._at <= self._s.stale_after

    async def answer(self) -> bool:
        """:meth:`ready` as the HTTP endpoint's check."""
        if not self.ready():
            logger.debug("probe answered not ready: %s", self._why)
            return False
        return True

    def imex_started(self) -> None:
        """IMEX runs now: start checking it (after its first output, or ``fast_interval``)."""
        self._started.set()

    def imex_output(self) -> None:
        """IMEX printed a line: while it is not READY, check again soon."""
        if not self._ok:
            self._wake.set()

    def imex_exited(self) -> None:
        """IMEX exited: not ready until a check passes again."""
        self._exits += 1
        self._set(False, "nvidia-imex exited")
        self._wake.set()

    async def run(self) -> None:
        """Check until cancelled (see the module docstring for the pace)."""
        await self._started.wait()
        # A check right at the spawn would fail: IMEX has not even read its config yet.
        await self._pause(self._s.fast_interval)
        while True:
            self._wake.clear()  # a line printed while the check runs brings the next one forward
            exits = self._exits
            result = await self._check()
            if exits != self._exits:
                # The answer may predate the exit: it says nothing about the IMEX running now.
                result = probe.CheckResult(False, "nvidia-imex exited during the check")
            if self._on_result is not None:
                self._on_result(result.ok)
            self._at = self._now()
            self._set(result.ok, result.message)
            if result.ok:
                # Lines IMEX printed while this check ran were cues to check a not yet READY
                # IMEX; this check saw READY, so they are spent. (Measured: without this, 13 of
                # 64 checks in an 18-node formation ran within a second after the first pass.)
                self._wake.clear()
            await self._pause(self._s.period if result.ok else self._s.fast_interval)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._wake.wait()
                # Output comes in bursts: let it settle, so one check covers the burst, but not
                # past settle_max (a READY IMEX keeps logging its links).
                loop = asyncio.get_running_loop()
                until = loop.time() + self._s.settle_max
                while True:
                    self._wake.clear()
                    await asyncio.sleep(max(0.0, min(self._s.settle, until - loop.time())))
                    if not self._wake.is_set() or loop.time() >= until:
                        return

    def _set(self, ok: bool, why: str) -> None:
        self._why = why
        if ok is self._ok:
            return
        self._ok = ok
        if ok:
            self._passed = True
            logger.info("own IMEX check passed: %s", why)
        else:
            logger.info("own IMEX check fails now: %s", why)
        if self._on_change is not None:
            self._on_change(ok)
