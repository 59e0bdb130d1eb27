"""Incoming peer connections of the simulated nvidia-imex (the server side of peers' links).

Every peer (and the daemon itself) opens a link to our ``SERVER_PORT``. We answer its ``hello``
with our node ID, node map and version — the peer compares them and marks a mismatch — then answer
pings; a good ``hello`` is passed on (``on_hello``), so our own link to that peer retries at
once. A peer that comes back as a new instance (a restart, not a SIGUSR1 reconnect) is logged
as such. On shutdown every open incoming connection gets a ``shutdown`` notice, so peers mark the
link ``D`` at once instead of waiting for a timeout; killed (in-process), every open connection is
dropped without a notice, as the kernel does for a killed process. With the ``hang`` fault on,
nothing is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from compute_domains.sim import imex_log, imex_wire


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
    ) -> None:
        self._node_id = node_id
        self._entries = list(entries)
        self._version = version
        self._log = log
        self._hanging = hanging
        self._on_hello = on_hello
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._instances: dict[int, str] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one incoming link until it closes."""
        self._open.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            hello = await imex_wire.recv(reader)
            if hello is None or hello["t"] != "hello":
                return
            if self._hanging():
                await asyncio.Event().wait()
            welcome = {
                "t": "welcome",
                "node": self._node_id,
                "map": self._entries,
                "version": self._version,
            }
            await imex_wire.send(writer, welcome)
            if hello.get("map") != self._entries:
                return  # the peer logs the mismatch and disables the link
            node_id = int(hello.get("from", -1))
            self._note_instance(node_id, str(hello.get("instance")))
            self._on_hello(node_id)
            while (message := await imex_wire.recv(reader)) is not None:
                if message["t"] == "ping" and not self._hanging():
                    await imex_wire.send(writer, {"t": "pong"})
        except (OSError, imex_wire.ProtocolError, ValueError):
            return
        finally:
            self._open.discard(writer)
            if task is not None:
                self._handlers.discard(task)
            await imex_wire.close(writer)

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
        notice = {"t": "shutdown", "from": self._node_id, "instance": instance}
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
