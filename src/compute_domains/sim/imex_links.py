"""One outgoing peer link of the simulated nvidia-imex: connect, handshake, keep alive, reconnect.

Each daemon keeps one link to every node of its nodes file, itself included. A link:

* resolves the node's entry afresh on every attempt (a fresh "channel" per try, so changed hosts
  entries are picked up), connects from our bind address to ``<address>:SERVER_PORT``, and
  retries with backoff from 0.5 s up to 10 s (``RECONNECT``);
* on ``welcome``, compares node maps and versions: a mismatch marks the link ``!M!``/``!V!`` and
  blocks it for the life of the process (communication disabled until everything restarts);
  an answer from a different node ID than expected is treated as a failed attempt;
* while connected, pings every ``ping_interval`` (all links of a daemon at the same moments:
  :func:`ping_due`) and treats a missing pong after ``ping_timeout``
  as a lost connection (a hung peer); time by which its own event loop woke late does not count
  as silence (a starved loop is not a hung peer);
* on loss: ``R`` (recovering) while the disconnect grace time runs (-1: forever), then ``D``;
  a peer's ``shutdown`` notice (over the link, or to our server: :meth:`OutgoingLink.peer_left`)
  means clean-up starts at once: ``D``. Only a notice with our node map's fingerprint counts
  (``imex_peers``), keyed by node ID alone: with equal maps another domain's node ``k`` takes our
  link to our node ``k`` down (upstream #1447), which the next attempt finds again;
* on :meth:`OutgoingLink.restart` (SIGUSR1) closes and re-opens, keeping its state unless the
  reconnect fails; on :meth:`OutgoingLink.poke` re-checks injected faults (drop-link).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import random
from collections.abc import Callable, Sequence

from compute_domains.infra import backoff
from compute_domains.sim import imex_config, imex_log, imex_wire
from compute_domains.sim.imex_wire import Link

RECONNECT = backoff.Backoff(initial=0.5, maximum=10.0, jitter=0.2)
LATE_GRACE = 0.25
"""How late (seconds) a link's wake-up may be before the rest stops counting as a peer's silence."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LinkContext:
    """What every link of one daemon shares."""

    node_id: int
    instance: str
    entries: Sequence[str]
    version: str
    server_port: int
    bind_ip: str
    grace_time: int
    resolver: imex_config.Resolver
    log: imex_log.ImexLog
    faults: Callable[[], imex_config.Faults]
    rng: random.Random
    connect_timeout: float = 2.0
    reconnect: backoff.Backoff = RECONNECT
    ping_interval: float = 1.0
    ping_timeout: float = 4.0
    ping_phase: float = 0.0
    """Where in each ``ping_interval`` this daemon's links ping (see :func:`ping_due`)."""

    @property
    def domain(self) -> str:
        """Our node map's fingerprint, which every message we send carries."""
        return imex_wire.domain_fingerprint(self.entries)


def ping_due(now: float, interval: float, phase: float) -> float:
    """The next ping time after ``now``: the next point of the grid ``phase + k * interval``.

    Every link of a daemon shares its grid, so the loop wakes once per interval for all of them
    (and their pongs come back together); daemons pick their phases at random, so a process that
    runs many of them (in-process) still spreads its pings over the interval.
    """
    return phase + (math.floor((now - phase) / interval) + 1) * interval


class OutgoingLink:
    """This daemon's connection to node ``target``; :attr:`state` is its cell in the table."""

    def __init__(self, ctx: LinkContext, target: int) -> None:
        self._ctx = ctx
        self.target = target
        self.state = Link.NEVER_CONNECTED
        self.times_connected = 0
        self._wake = asyncio.Event()
        self._restart = False
        self._notified: set[str] = set()
        self._left = False
        self._loss_generation = 0

    @property
    def _entry(self) -> str:
        return self._ctx.entries[self.target]

    def restart(self) -> None:
        """Close and re-open the connection (re-resolving the name); SIGUSR1."""
        self._restart = True
        self._wake.set()

    def poke(self) -> None:
        """Re-check injected faults now."""
        self._wake.set()

    def peer_left(self, instance: str) -> None:
        """Node ``target``'s instance ``instance`` announced (to our server) that it is leaving:
        as the same notice over this link, clean-up starts at once."""
        if not self._first_notice(instance):
            return
        if self.state is Link.CONNECTED:
            self._left = True  # the session ends as on the notice over the link
            self._wake.set()
        elif self.state is Link.RECOVERING:
            self._loss_generation += 1
            self.state = Link.DISCONNECTED

    def peer_seen(self) -> None:
        """The target node just linked to us: it is up, so a link waiting to retry tries now."""
        if self.state is not Link.CONNECTED:
            self._wake.set()

    async def run(self) -> None:
        """Keep the link up until cancelled."""
        attempt = 0
        while True:
            if self.state in (Link.NODE_MAP_MISMATCH, Link.VERSION_MISMATCH):
                await asyncio.Event().wait()  # communication disabled for good
            if self._ctx.faults().drops(self.target):
                await self._wait_wake(None)
                continue
            self._restart = False
            attempt += 1
            if attempt == 1 or attempt % 10 == 0:
                self._ctx.log.info(
                    f"Attempting connection for target node {self.target} - "
                    f"{self._entry}:{self._ctx.server_port}, attempt #{attempt}"
                )
            session = await self._open()
            if session is None:
                if self.state is Link.CONNECTED:
                    self._lost()
                await self._wait_wake(self._ctx.reconnect.delay(min(attempt - 1, 8), self._ctx.rng))
                continue
            attempt = 0
            self._left = False
            reader, writer, address = session
            self._loss_generation += 1  # cancels a pending grace timer
            self.times_connected += 1
            self.state = Link.CONNECTED
            via = "ip address" if imex_config.is_ip(self._entry) else "address"
            self._ctx.log.info(
                f"Connection established to node {self.target} with {via} {self._entry}. "
                f"Number of times connected: {self.times_connected}"
            )
            outcome = await self._session(reader, writer)
            if self._left:
                outcome = "shutdown"
            if outcome == "restart":
                continue
            if outcome == "shutdown":
                self._disconnected(address)
            else:
                self._lost(address)
            await self._wait_wake(self._ctx.reconnect.delay(0, self._ctx.rng))

    async def _wait_wake(self, timeout: float | None) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        self._wake.clear()

    async def _open(
        self,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str] | None:
        ctx = self._ctx
        address = await ctx.resolver.resolve(self._entry)
        if address is None:
            return None
        try:
            async with asyncio.timeout(ctx.connect_timeout):
                reader, writer = await imex_wire.connect_from(ctx.bind_ip, address, ctx.server_port)
        except (OSError, TimeoutError):
            return None
        try:
            hello = {
                "t": "hello",
                "from": ctx.node_id,
                "instance": ctx.instance,
                "map": list(ctx.entries),
                "domain": ctx.domain,
                "version": ctx.version,
            }
            await imex_wire.send(writer, hello)
            async with asyncio.timeout(ctx.ping_timeout):
                welcome = await imex_wire.recv(reader)
        except (OSError, TimeoutError, imex_wire.ProtocolError):
            await imex_wire.close(writer)
            return None
        if welcome is None or welcome.get("t") != "welcome":
            await imex_wire.close(writer)
            return None
        if welcome.get("map") != list(ctx.entries):
            self.state = Link.NODE_MAP_MISMATCH
            ctx.log.error(
                f"Node configuration mapping mismatch with node {self.target} "
                f"({self._entry}); communication disabled"
            )
        elif welcome.get("version") != ctx.version:
            self.state = Link.VERSION_MISMATCH
            ctx.log.error(
                f"IMEX version mismatch with node {self.target}: local {ctx.version}, "
                f"remote {welcome.get('version')}; communication disabled"
            )
        elif welcome.get("node") != self.target:
            ctx.log.warning(
                f"Address {address} of node {self.target} is answered by node "
                f"{welcome.get('node')}; retrying"
            )
        else:
            return reader, writer, address
        await imex_wire.close(writer)
        return None

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        """Keep a connected link alive; why it ended: restart, shutdown, lost or dropped.

        Pings are sent from a timer callback and the session waits on one future that the frame
        reader, the wake event or the timer resolves, so an idle link costs one timer, one write
        and one read a second (no task step, waiter set or timeout per ping). Every link of a
        daemon pings on the same grid (``ping_due``): one wake-up of the loop sends them all.
        """
        ctx = self._ctx
        loop = asyncio.get_running_loop()
        last_pong = loop.time()
        ended: asyncio.Future[str] = loop.create_future()

        def end(outcome: str) -> None:
            if not ended.done():
                ended.set_result(outcome)

        async def read_frames() -> None:
            nonlocal last_pong
            while True:
                try:
                    message = await imex_wire.recv(reader)
                except (OSError, imex_wire.ProtocolError):
                    message = None
                if message is None:
                    end("lost")
                    return
                if message["t"] == "pong":
                    last_pong = loop.time()
                elif message["t"] == "shutdown" and self._shutdown_notice(message):
                    end("shutdown")
                    return

        due = loop.time()
        timer: asyncio.TimerHandle | asyncio.Handle | None = None

        def tick() -> None:
            nonlocal last_pong, due, timer
            now = loop.time()
            # Time this loop could not run is nobody's silence: with hundreds of daemons in
            # one process a starved loop wakes late, and the pong waiting unread in the socket
            # (or a peer on the same loop, as late as we are) would count as a hung peer, and
            # the reconnects would starve the loop further.
            last_pong += max(0.0, now - due - LATE_GRACE)
            if now - last_pong > ctx.ping_timeout or writer.transport.is_closing():
                end("lost")
                return
            writer.write(imex_wire.PING)  # a few bytes: no flow control to wait for
            due = ping_due(now, ctx.ping_interval, ctx.ping_phase)
            timer = loop.call_at(due, tick)

        # One waiter for the wake event per session, not one per ping: thousands of links ping
        # every second in a large in-process sim.
        wake: asyncio.Task[bool] | None = None

        def woken(task: asyncio.Task[bool]) -> None:
            nonlocal wake
            if task.cancelled() or ended.done():
                return  # the session is over: the next one takes the wake-up
            self._wake.clear()
            if self._left:
                end("shutdown")
            elif ctx.faults().drops(self.target):
                end("dropped")
            elif self._restart:
                end("restart")
            else:
                wake = asyncio.create_task(self._wake.wait())
                wake.add_done_callback(woken)

        frames = asyncio.create_task(read_frames(), name=f"imex-link-{self.target}-read")
        wake = asyncio.create_task(self._wake.wait())
        wake.add_done_callback(woken)
        timer = loop.call_soon(tick)
        try:
            return await ended
        finally:
            # Also when the link is cancelled (its daemon stops): a pending task left behind
            # would be destroyed pending in a process that goes on (in-process).
            timer.cancel()
            wake.cancel()
            frames.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await frames
            await imex_wire.close(writer)

    def _shutdown_notice(self, message: imex_wire.Message) -> bool:
        """A notice over the link; False (dropped) when it is another domain's."""
        theirs = message.get("domain")
        if theirs != self._ctx.domain:
            self._ctx.log.warning(
                f"Dropped a shutdown message from node {self.target} ({self._entry}) of "
                f"another IMEX domain: its node map {theirs} is not ours ({self._ctx.domain})"
            )
            return False
        self._first_notice(str(message.get("instance", "")))
        return True

    def _first_notice(self, instance: str) -> bool:
        """Log the first notice of ``instance`` (several come: over the link and on their own
        connection); False for a repeat, or for a notice naming our own node."""
        if self.target == self._ctx.node_id or instance in self._notified:
            return False
        self._notified.add(instance)
        self._ctx.log.info(
            f"Received notification of shutdown from node {self.target} - {self._entry}"
        )
        return True

    def _lost(self, address: str | None = None) -> None:
        self._ctx.log.error(
            f"Node disconnect event detected for node {self.target} with address "
            f"{address or self._entry}"
        )
        grace = self._ctx.grace_time
        if grace == 0:
            self.state = Link.DISCONNECTED
            return
        self.state = Link.RECOVERING
        if grace > 0:
            self._loss_generation += 1
            generation = self._loss_generation
            asyncio.get_running_loop().call_later(grace, self._grace_expired, generation)

    def _grace_expired(self, generation: int) -> None:
        if generation == self._loss_generation and self.state is Link.RECOVERING:
            self.state = Link.DISCONNECTED

    def _disconnected(self, address: str) -> None:
        self._ctx.log.error(
            f"Node disconnect event detected for node {self.target} with address {address}"
        )
        self.state = Link.DISCONNECTED
