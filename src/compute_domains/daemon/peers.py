"""Apply peer-set changes to the local IMEX daemon: hosts block, first start, paced SIGUSR1.

Each new peer mapping (clique index → pod IP, ours included) is written into our managed block
of the hosts file, under the IMEX domain's names (``dnsnames``), every unfilled slot's name
mapped to the unfilled-slot address (upstream's sentinel 127.0.0.2 by default), so that no
name IMEX dials falls through to DNS. The first mapping starts ``nvidia-imex`` (its nodes file
names every slot, and it finds its own node ID by resolving those names, so it must not start
before our own name resolves). After that, a change that altered the file asks IMEX to
re-resolve its peers with SIGUSR1; IMEX is never restarted for a peer change.

SIGUSR1 pacing: IMEX ignores a SIGUSR1 that arrives within ``reload_interval`` (5 s) of the
previous one, so a second change inside that window must not be signalled at once. Changes are
coalesced: while a signal waits for the window to pass, more changes only update the file, and
one signal then covers all of them. The window belongs to one IMEX process: a restarted IMEX
(new pid) has read the file fresh and may be signalled at once. The file write and the signal
are serialised by one lock, so IMEX never re-reads a half-written file.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from compute_domains.daemon import dnsnames
from compute_domains.daemon.config import PeerSettings
from compute_domains.infra import logs

logger = logging.getLogger(__name__)


class ImexProcess(Protocol):
    """What the updater needs of the supervisor."""

    @property
    def pid(self) -> int | None:
        """The running child's pid, or None."""

    async def start(self) -> bool:
        """Ensure the child runs; True if this call started it."""

    def reload(self) -> bool:
        """Send SIGUSR1; False when no child runs."""


class ReloadPacer:
    """When the next SIGUSR1 may be sent so that IMEX honours it; pure bookkeeping.

    Args:
        interval: seconds after a signal during which IMEX ignores another one.
    """

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._last: tuple[int, float] | None = None

    def delay(self, now: float, pid: int) -> float:
        """Seconds to wait before signalling process ``pid`` at time ``now`` (0: at once)."""
        if self._last is None or self._last[0] != pid:
            return 0.0
        return max(0.0, self._last[1] + self._interval - now)

    def sent(self, now: float, pid: int) -> None:
        """Record a signal sent to ``pid`` at ``now``."""
        self._last = (pid, now)


def describe(mapping: Mapping[int, str]) -> str:
    """``0=10.0.0.1 1=10.0.0.2`` for log lines."""
    return " ".join(f"{i}={ip}" for i, ip in sorted(mapping.items())) or "(none)"


class PeerUpdater:
    """Owns the hosts block and the reload signal; ``update()`` feeds it, ``run()`` applies.

    Args:
        settings: hosts file and pacing.
        process: the IMEX supervisor.
        max_nodes: slots per clique (for unfilled-slot addresses).
        domain: the IMEX domain's identity, whose names the hosts block maps (a CD's UID, or
            ``shared-imex.<cliqueID>``; "" gives NVIDIA's names, the same in every domain).
        clock: monotonic seconds (the loop's time by default); injectable for tests.
        on_started: called once IMEX has been started for the first time.
    """

    def __init__(
        self,
        settings: PeerSettings,
        process: ImexProcess,
        *,
        max_nodes: int,
        domain: str = "",
        clock: Callable[[], float] | None = None,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        self._settings = settings
        self._process = process
        self._max = max_nodes
        self._domain = domain
        self._clock = clock
        self._on_started = on_started
        self._pacer = ReloadPacer(settings.reload_interval)
        self._wanted: dict[int, str] | None = None
        self._applied: dict[int, str] | None = None
        self._changed = asyncio.Event()
        self._reload = asyncio.Event()
        self._lock = asyncio.Lock()
        self._started = False

    def update(self, mapping: Mapping[int, str]) -> None:
        """A new peer mapping (the latest wins); never blocks."""
        self._wanted = dict(mapping)
        self._changed.set()

    async def run(self) -> None:
        """Apply mappings and send paced reloads until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._apply_loop(), name="peers-apply")
            tg.create_task(self._signal_loop(), name="peers-reload")

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def _apply_loop(self) -> None:
        while True:
            # NVIDIA's words (its verbosity 1) for waiting on the clique's next peer list.
            logger.log(logs.V1, "Wait for updated ComputeDomainDaemonInfo list (clique peers)")
            await self._changed.wait()
            self._changed.clear()
            wanted = self._wanted
            if wanted is None or wanted == self._applied:
                continue
            async with self._lock:
                changed = await asyncio.to_thread(self._write_hosts, wanted)
            logger.info("peer mappings: %s", describe(wanted))
            self._applied = wanted
            if not self._started:
                # A spawn failure (no nvidia-imex on PATH) propagates: the daemon cannot work.
                await self._process.start()
                self._started = True
                if self._on_started is not None:
                    self._on_started()
            elif changed:
                self._reload.set()

    def _write_hosts(self, mapping: Mapping[int, str]) -> bool:
        block = dict(mapping)
        if self._settings.unfilled_address:
            block = dnsnames.with_sentinels(block, self._max, self._settings.unfilled_address)
        return dnsnames.update_hosts_file(self._settings.hosts_file, block, domain=self._domain)

    async def _signal_loop(self) -> None:
        while True:
            await self._reload.wait()
            pid = self._process.pid
            if pid is None:
                # No IMEX now (restart backoff): the next one reads the file fresh.
                self._reload.clear()
                continue
            delay = self._pacer.delay(self._now(), pid)
            if delay > 0:
                logger.debug("next SIGUSR1 in %.2fs (IMEX ignores faster ones)", delay)
                await asyncio.sleep(delay + self._settings.reload_margin)
                continue  # re-check: the process may have changed meanwhile
            async with self._lock:
                self._reload.clear()
                pid = self._process.pid
                if pid is not None and self._process.reload():
                    self._pacer.sent(self._now(), pid)
