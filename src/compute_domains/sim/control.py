"""The sim supervisor's control socket: node faults requested from another process.

One JSON request per connection on ``<sim>/control.sock``: ``{"op": "stop"|"start"|"reboot",
"node": NAME}`` or ``{"op": "nodes"}``; the answer is ``{"ok": ...}`` or ``{"error": MESSAGE}``.
``request()`` is the client side used by ``cdctl sim node`` and tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from pathlib import Path
from typing import Any

from compute_domains.sim import agent as agent_mod
from compute_domains.sim import errors

logger = logging.getLogger(__name__)


class ControlServer:
    """Serves the control socket of one sim until cancelled."""

    def __init__(self, path: Path, agent: agent_mod.NodeAgent) -> None:
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
        op, name = req.get("op"), str(req.get("node", ""))
        if op == "nodes":
            return {
                "ok": {
                    n: {
                        "running": n in self._agent.nodes and self._agent.running(n),
                        "address": spec.address,
                        "clique": spec.clique,
                    }
                    for n, spec in self._agent.specs.items()
                }
            }
        if name not in self._agent.specs:
            return {"error": f"no node named {name!r} in this sim"}
        if op == "stop":
            await self._agent.stop_node(name)
        elif op == "start":
            await self._agent.start_node(name)
        elif op == "reboot":
            await self._agent.reboot_node(name)
        else:
            return {"error": f"unknown operation {op!r}"}
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
    answer = json.loads(data)
    if "error" in answer:
        raise errors.SimError(answer["error"])
    return answer["ok"]
