"""Incoming peer connections of the simulated nvidia-imex (the server side of peers' links).

Every peer (and the daemon itself) opens a link to our ``SERVER_PORT``. We answer its ``hello``
with our node ID, node map and version — the peer compares them and marks a mismatch — then answer
pings; a good ``hello`` is passed on (``on_hello``), so our own link to that peer retries at
once. A peer that comes back as a new instance (a restart, not a SIGUSR1 reconnect) is logged
as such. On shutdown every open incoming connection gets a ``shutdown`` notice, so peers mark the
link ``D`` at once instead of waiting for a timeout, and :func:`announce_shutdown` sends one more
to every listed peer's address, each on a fresh connection; killed (in-process), every open
connection is dropped without a notice, as the kernel does for a killed process. With the
``hang`` fault on, nothing is answered.

Domains (upstream #1447): every message names its sender's domain by its node-map fingerprint
(``imex_wire.domain_fingerprint``), and a message counts as from our own domain exactly when that
equals ours; IMEX has no other notion of a domain. A ``hello`` of another map is answered (so the
peer marks ``!M!``) and logged, then the connection closes; a ``shutdown`` of another map is
dropped and logged; a ``shutdown`` of our map is passed on (``on_shutdown``) as node ``from``
leaving, whichever process sent it: with NVIDIA's names (the same in every ComputeDomain) an old
domain's daemon that dials an address now held by a new domain's IMEX is one of us to it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from compute_domains.sim import imex_links, imex_log, imex_wire


class PeerServer:
    """Handles incoming peer connections for one daemon."""

    def __init__(
        self,
        *,
        node_id: int,
        entries: Sequence[str],
        version: str,
        log: imex_log.ImexLog,
        hanging: Callable[[], bool],
        on_hello: Callable[[int], None] = lambda node_id: None,
        on_shutdown: Callable[[int, str], None] = lambda node_id, instance: None,
    ) -> None:
        """``on_shutdown(node, instance)``: a peer of our domain announced that it is leaving."""
        self._node_id = node_id
        self._entries = list(entries)
        self._domain = imex_wire.domain_fingerprint(self._entries)
        self._version = version
        self._log = log
        self._hanging = hanging
        self._on_hello = on_hello
        self._on_shutdown = on_shutdown
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._instances: dict[int, str] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one incoming link (or one peer's shutdown notice) until it closes."""
        self._open.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            hello = await imex_wire.recv(reader)
            if hello is not None and hello["t"] == "shutdown" and not self._hanging():
                self._shutdown_notice(hello, writer)
            if hello is None or hello["t"] != "hello":
                return
            if self._hanging():
                await asyncio.Event().wait()
            welcome = {
                "t": "welcome",
                "node": self._node_id,
                "map": self._entries,
                "domain": self._domain,
                "version": self._version,
            }
            await imex_wire.send(writer, welcome)
            node_id = int(hello.get("from", -1))
            if hello.get("map") != self._entries:
                # The peer logs the mismatch and disables its link; we say who knocked.
                self._log.warning(
                    f"Refused a connection from node {node_id} ({_peer(writer)}) of another "
                    f"IMEX domain: its node map {_domain_of(hello)} is not ours ({self._domain})"
                )
                return
            self._note_instance(node_id, str(hello.get("instance")))
            self._on_hello(node_id)
            while (message := await imex_wire.recv(reader)) is not None:
                if self._hanging():
                    continue
                if message["t"] == "ping":
                    await imex_wire.send_frame(writer, imex_wire.PONG)
                elif message["t"] == "shutdown":
                    self._shutdown_notice(message, writer)
        except (OSError, imex_wire.ProtocolError, ValueError):
            return
        finally:
            self._open.discard(writer)
            if task is not None:
                self._handlers.discard(task)
            await imex_wire.close(writer)

    def _shutdown_notice(self, message: imex_wire.Message, writer: asyncio.StreamWriter) -> None:
        node_id = int(message.get("from", -1))
        theirs = _domain_of(message)
        if theirs != self._domain:
            self._log.warning(
                f"Dropped a shutdown message from node {node_id} ({_peer(writer)}) of another "
                f"IMEX domain: its node map {theirs} is not ours ({self._domain})"
            )
            return
        self._on_shutdown(node_id, str(message.get("instance", "")))

    def _note_instance(self, node_id: int, instance: str) -> None:
        previous = self._instances.get(node_id)
        self._instances[node_id] = instance
        if previous is not None and previous != instance:
            self._log.info(
                f"Node {node_id} reconnected as a new instance; cleaning up its previous imports"
            )

    def abort(self) -> None:
        """Drop every open incoming connection without a word (the process was killed: the
        kernel resets its sockets, so the peers see the links break at once)."""
        for writer in list(self._open):
            writer.transport.abort()

    async def notify_shutdown(self, instance: str) -> None:
        """Tell every connected peer that we are going away, then close the connections."""
        notice = {
            "t": "shutdown",
            "from": self._node_id,
            "instance": instance,
            "domain": self._domain,
        }
        writers = list(self._open)
        for writer in writers:
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(1.0):
                    await imex_wire.send(writer, notice)
        await asyncio.gather(*(imex_wire.close(w) for w in writers))
        # Their handlers end on the EOF; wait for them (bounded), so that, like a process
        # exit, a stopped daemon leaves no task of its own behind in a process of others.
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=1.0)


async def announce_shutdown(ctx: imex_links.LinkContext, *, timeout: float = 1.0) -> None:
    """Tell every listed peer but us that we are leaving: one ``shutdown`` frame, with our
    domain's fingerprint, on a fresh connection to the address its entry resolves to now.

    As the real daemon's SHUTTING_DOWN message, it goes to an address, not to a domain: whoever
    holds that address now receives it (upstream #1447), and only the receiver's node-map check
    keeps it out of another domain. Whole announcement bounded by ``timeout``; an unreachable
    peer is skipped.
    """
    notice = imex_wire.encode(
        {"t": "shutdown", "from": ctx.node_id, "instance": ctx.instance, "domain": ctx.domain}
    )

    async def tell(entry: str) -> None:
        address = await ctx.resolver.resolve(entry)
        if address is None:
            return
        _, writer = await imex_wire.connect_from(ctx.bind_ip, address, ctx.server_port)
        try:
            writer.write(notice)
            await writer.drain()
        finally:
            await imex_wire.close(writer)

    others = [e for k, e in enumerate(ctx.entries) if k != ctx.node_id]
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await asyncio.gather(*(tell(e) for e in others), return_exceptions=True)


def _domain_of(message: imex_wire.Message) -> str:
    domain = message.get("domain")
    if isinstance(domain, str):
        return domain
    entries = message.get("map")
    return imex_wire.domain_fingerprint(entries) if isinstance(entries, list) else "(none)"


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "?"
