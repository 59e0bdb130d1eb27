"""The simulated nvidia-imex's command service (what ``nvidia-imex-ctl`` talks to).

``query`` answers this node's row: state word, configured host, version and its links. ``domain``
answers every configured node's row: the local daemon asks each peer's command port (at the
peer's nodes-file address, ``IMEX_CMD_PORT``) and reports a peer it cannot reach, or that does not
answer within the timeout, as ``UNAVAILABLE`` with no links. So, as with the real service, a
command port that is bound to 127.0.0.1 or blocked between peers leaves the domain ``DEGRADED``.

When the ``hang`` fault is on, requests are read but never answered (a wedged daemon).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from compute_domains.sim import imex_config, imex_wire


class CommandService:
    """Serves command-port requests for one daemon."""

    def __init__(
        self,
        *,
        node_id: int,
        entries: Sequence[str],
        cmd_port: int | None,
        resolver: imex_config.Resolver,
        row: Callable[[], dict[str, Any]],
        hanging: Callable[[], bool],
        peer_timeout: float,
    ) -> None:
        self._node_id = node_id
        self._entries = list(entries)
        self._cmd_port = cmd_port
        self._resolver = resolver
        self._row = row
        self._hanging = hanging
        self._peer_timeout = peer_timeout

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer requests on one command connection until the client closes it."""
        try:
            while True:
                request = await imex_wire.recv(reader)
                if request is None:
                    return
                if self._hanging():
                    await asyncio.Event().wait()
                if request["t"] == "query":
                    await imex_wire.send(writer, self._row())
                elif request["t"] == "domain":
                    nodes = await self._gather(bool(request.get("hostnames")))
                    reply = {"t": "report", "local": self._node_id, "nodes": nodes}
                    await imex_wire.send(writer, reply)
                else:
                    await imex_wire.send(writer, {"t": "error", "message": "unknown request"})
        except (OSError, imex_wire.ProtocolError):
            return
        finally:
            await imex_wire.close(writer)

    async def _gather(self, hostnames: bool) -> list[dict[str, Any]]:
        rows = await asyncio.gather(*(self._node_row(k) for k in range(len(self._entries))))
        for node_id, row in enumerate(rows):
            entry = self._entries[node_id]
            row["hostName"] = await self._host_name(entry) if hostnames else ""
        return list(rows)

    async def _host_name(self, entry: str) -> str:
        if not imex_config.is_ip(entry):
            return entry
        return self._resolver.host_name(entry) or "N/A"

    async def _node_row(self, node_id: int) -> dict[str, Any]:
        if node_id == self._node_id:
            return self._row()
        unavailable: dict[str, Any] = {
            "t": "status",
            "node": node_id,
            "state": "UNAVAILABLE",
            "host": self._entries[node_id],
            "version": "",
            "connections": {},
        }
        if self._cmd_port is None:
            return unavailable
        try:
            async with asyncio.timeout(self._peer_timeout):
                row = await self._query_peer(node_id)
        except (OSError, TimeoutError, imex_wire.ProtocolError):
            return unavailable
        if row is None or row.get("t") != "status" or row.get("node") != node_id:
            return unavailable
        return row

    async def _query_peer(self, node_id: int) -> imex_wire.Message | None:
        assert self._cmd_port is not None
        address = await self._resolver.resolve(self._entries[node_id])
        if address is None:
            return None
        reader, writer = await asyncio.open_connection(address, self._cmd_port)
        try:
            await imex_wire.send(writer, {"t": "query"})
            return await imex_wire.recv(reader)
        finally:
            await imex_wire.close(writer)
