"""Which peers our IMEX has lost: a peer is reported once its link stays lost past a bound.

A powered-off node stays Ready in Kubernetes until the node grace runs out (40 s by default);
its peers' IMEX daemons lose their links to it within seconds. This module turns what our IMEX
sees into a report the controller can use (docs/status.md, ``PeerUnreachable``):

* IMEX's own view is asked with ``nvidia-imex-ctl -c <cfg> -N -j``: our row (our index) lists
  each link's state. A link counts as *lost* when its state is anything but ``CONNECTED``,
  ``NEVER_CONNECTED`` (a peer still starting is not lost; it was never there) or
  ``AUTHENTICATING``: IMEX's ``R`` (recovering), ``D`` (disconnected) and the mismatches that
  disable communication for good.
* No polling while all is well: a query is cued by IMEX's own lines, ``Node disconnect event
  detected`` and ``Received notification of shutdown`` (and, while a loss is tracked,
  ``Connection established``), after a short settle so a burst costs one query. While a lost link
  waits out the bound it is asked again every ``recheck`` seconds; while reported peers stay
  lost, every ``period`` seconds (their return is cued by IMEX anyway).
* A peer is reported once our queries have seen its link lost for ``bound`` seconds (2 s by
  default), with the wall-clock time we first saw it lost. A link that IMEX keeps (a slow but
  live peer: IMEX credits the time a late loop woke, and a missing pong needs its ping timeout)
  or that reconnects within the bound reports nothing, so a slow peer never flaps.
* Only peers of our clique (the indices of the current peer mapping) are reported; ``on_report``
  gets index → since (RFC 3339) whenever that set changes, and only then.
* A query that fails or gives no report of our row changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path

from compute_domains.daemon.config import PeerLossSettings

logger = logging.getLogger(__name__)

NOT_LOST = frozenset({"CONNECTED", "NEVER_CONNECTED", "AUTHENTICATING"})
"""Link states of ``-N -j`` that are not a lost link."""
LOSS_CUES = ("Node disconnect event detected", "Received notification of shutdown")
"""IMEX log texts that say a link was just lost."""
RETURN_CUE = "Connection established"
"""The IMEX log text that says a link is up (again)."""
SETTLE = 0.2
"""Seconds after a cue before the query, so a burst of lines costs one."""

Runner = Callable[[Sequence[str], float], Awaitable[tuple[int, str]]]
"""Runs a program to its end: (exit status, merged output) (``launcher.Launcher.run``)."""


def lost_links(text: str, own: int) -> dict[int, str] | None:
    """Index → state of our row's lost links in a ``-N -j`` answer; None when it has no row of
    ours to read (not JSON, our node missing or ``UNAVAILABLE``)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    row = nodes.get(str(own)) if isinstance(nodes, dict) else None
    if not isinstance(row, dict) or row.get("status") == "UNAVAILABLE":
        return None
    out: dict[int, str] = {}
    for key, link in (row.get("connections") or {}).items():
        try:
            index = int(key)
        except ValueError:
            continue
        state = link.get("status") if isinstance(link, dict) else None
        if index != own and isinstance(state, str) and state not in NOT_LOST:
            out[index] = state
    return out


def stamp(at: float) -> str:
    """Wall-clock seconds as RFC 3339 (UTC, seconds)."""
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PeerWatch:
    """Reports the peers our IMEX lost for longer than the bound (module docstring).

    Args:
        run: how the ctl query runs (a launcher's ``run``).
        ctl: the ``nvidia-imex-ctl`` command; config: our IMEX config file.
        settings: bound and pace.
        on_report: called with index → since of the reported peers, on every change.
        clock: monotonic seconds; wall: wall-clock seconds (both injectable for tests).
    """

    def __init__(
        self,
        run: Runner,
        *,
        ctl: str,
        config: Path,
        settings: PeerLossSettings,
        on_report: Callable[[dict[int, str]], None],
        clock: Callable[[], float] | None = None,
        wall: Callable[[], float] | None = None,
    ) -> None:
        self._run = run
        self._argv = [ctl, "-c", str(config), "-N", "-j"]
        self._s = settings
        self._on_report = on_report
        self._clock = clock
        self._wall = wall or (lambda: datetime.datetime.now(datetime.UTC).timestamp())
        self._wake = asyncio.Event()
        self._own: int | None = None
        self._peers: frozenset[int] = frozenset()
        self._seen: dict[int, tuple[float, str]] = {}
        """Index → (monotonic, RFC 3339) of when our queries first saw its link lost."""
        self._reported: dict[int, str] = {}

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def set_peers(self, own: int | None, peers: Collection[int]) -> None:
        """Our index and our clique's indices (from the peer mapping); a peer that left is
        forgotten at the next query."""
        self._own = own
        self._peers = frozenset(peers) - ({own} if own is not None else set())

    def cue(self, line: str) -> None:
        """An IMEX line: a loss (or, while one is tracked, a return) brings a query forward."""
        if any(text in line for text in LOSS_CUES) or (self._seen and RETURN_CUE in line):
            self._wake.set()

    async def run(self) -> None:
        """Query when cued or due, until cancelled."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._due()):
                    await self._wake.wait()
                    await asyncio.sleep(SETTLE)
            self._wake.clear()
            await self.check()

    def _due(self) -> float | None:
        """Seconds until the next query that is not cued (None: only a cue)."""
        if not self._seen:
            return None
        now = self._now()
        pending = [
            t + self._s.bound - now for i, (t, _) in self._seen.items() if i not in self._reported
        ]
        if pending:
            return max(0.0, min(self._s.recheck, *pending))
        return self._s.period

    async def check(self) -> None:
        """One query; report when the set of peers lost past the bound changed."""
        own = self._own
        if own is None:
            return
        asked = self._now()  # what the answer says was true by then
        code, text = await self._run(self._argv, self._s.timeout)
        lost = lost_links(text, own) if code == 0 else None
        if lost is None:
            logger.debug("peer links: no report from %s (exit status %d)", self._argv[0], code)
            return
        now = asked
        for index in [i for i in self._seen if i not in lost or i not in self._peers]:
            del self._seen[index]
        for index, state in lost.items():
            if index in self._peers and index not in self._seen:
                self._seen[index] = (now, stamp(self._wall()))
                logger.info("IMEX lost its link to peer %d (%s)", index, state)
        report = {i: since for i, (t, since) in self._seen.items() if now - t >= self._s.bound}
        if report != self._reported:
            logger.info(
                "peers lost for over %.1fs: %s", self._s.bound, _describe(report) or "(none)"
            )
            self._reported = report
            self._on_report(dict(report))


def _describe(report: Mapping[int, str]) -> str:
    return ", ".join(f"{i} since {since}" for i, since in sorted(report.items()))
