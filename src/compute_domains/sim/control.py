"""The sim supervisor's control socket: node faults requested from another process.

One JSON request per connection on ``<sim>/control.sock``: ``{"op": "stop"|"start"|"reboot",
"node": NAME}`` or ``{"op": "nodes"}``; the answer is ``{"ok": ...}`` or ``{"error": MESSAGE}``.
``request()`` is the client side used by ``cdctl sim node`` and tests; ``arequest()`` the same
from a coroutine (the supervisor forwarding a fault to the node host that runs the node,
``sim.hosts``). The server serves any ``Nodes``: the in-process agent or the node hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from compute_domains.sim import errors, topology

logger = logging.getLogger(__name__)


class Nodes(Protocol):
    """What the control socket acts on: the nodes of a sim (or of one node host)."""

    @property
    def specs(self) -> Mapping[str, topology.NodeSpec]:
        """Every node served, by name."""
        ...

    async def node_table(self) -> dict[str, dict[str, Any]]:
        """Node name → ``running``, ``address``, ``clique``."""
        ...

    async def act(self, op: str, name: str) -> None:
        """Apply ``stop``, ``start`` or ``reboot`` to one node (ValueError: unknown op)."""
        ...


class ControlServer:
    """Serves the control socket of one sim until cancelled."""

    def __init__(self, path: Path, agent: Nodes) -> None:
        self._path = path
        self._agent = agent

    async def run(self) -> None:
        """Serve until cancelled; removes the socket file on exit."""
        self._path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(self._handle, str(self._path))
        try:
            async with server:
                await server.serve_forever()
        finally:
            self._path.unlink(missing_ok=True)

    async def _answer(self, req: dict[str, Any]) -> dict[str, Any]:
        op, name = str(req.get("op")), str(req.get("node", ""))
        try:
            if op == "nodes":
                return {"ok": await self._agent.node_table()}
            if name not in self._agent.specs:
                return {"error": f"no node named {name!r} in this sim"}
            await self._agent.act(op, name)
        except (ValueError, errors.SimError) as err:
            return {"error": str(err)}
        return {"ok": f"node {name}: {op} done"}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = json.loads(await reader.readline())
            answer = await self._answer(req)
        except (ValueError, OSError) as err:
            answer = {"error": f"bad request: {err}"}
        writer.write(json.dumps(answer).encode() + b"\n")
        with contextlib.suppress(OSError):
            await writer.drain()
            writer.close()


def request(path: Path, payload: dict[str, Any], timeout: float = 120.0) -> Any:
    """Send one request to a running sim; returns ``ok`` or raises ``SimError``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError as err:
            raise errors.SimError(
                f"the sim's control socket {path} does not answer ({err}); "
                "is the sim running? (`cdctl sim status`)"
            ) from err
        sock.sendall(json.dumps(payload).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return _result(data)


def _result(data: bytes) -> Any:
    answer = json.loads(data)
    if "error" in answer:
        raise errors.SimError(answer["error"])
    return answer["ok"]


async def arequest(path: Path, payload: dict[str, Any], timeout: float = 120.0) -> Any:
    """``request`` from a coroutine."""
    try:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=1 << 24)
    except OSError as err:
        raise errors.SimError(f"the control socket {path} does not answer ({err})") from err
    try:
        writer.write(json.dumps(payload).encode() + b"\n")
        await writer.drain()
        async with asyncio.timeout(timeout):
            data = await reader.readline()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    if not data:
        raise errors.SimError(f"the control socket {path} closed without an answer")
    return _result(data)
