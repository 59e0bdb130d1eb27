"""The sim supervisor's control socket: node and control-plane faults asked for by another process.

One JSON request per connection on ``<sim>/control.sock``: ``{"op": "stop"|"start"|"reboot",
"node": NAME}`` or ``{"op": "nodes"}`` (``cdctl sim node``); ``{"op": "restart", "component":
NAME, "down": SECONDS, "kill": BOOL}`` or ``{"op": "pause", "component": NAME, "seconds":
SECONDS}`` (``cdctl sim control-plane``, ``sim.drills``). The answer is ``{"ok": ...}`` or
``{"error": MESSAGE}``. A pause ends early when its client half-closes or drops the connection
(an interrupted ``cdctl``): the paused process is never left stopped for a client that is gone.
``request()`` is the client side used by the CLI and tests; ``arequest()`` the same from a
coroutine (the supervisor forwarding a fault to the node host that runs the node,
``sim.hosts``). The server serves any ``Nodes`` (the in-process agent or the node hosts; none on
a sim without nodes) and, in the supervisor, its ``ControlPlane``.
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

from compute_domains.sim import drills, errors, topology

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


class Drills(Protocol):
    """What the control socket's control-plane faults act on (``controlplane.ControlPlane``)."""

    async def restart(
        self, name: str, *, down_s: float = 0.0, kill: bool = False
    ) -> drills.Restarted:
        """Stop a component and start it again (``SimError``: unknown, or busy)."""
        ...

    async def pause(
        self, name: str, seconds: float, *, resume: asyncio.Event | None = None
    ) -> float:
        """Hold a component stopped; how long it was (``SimError``: unknown, busy, bad length)."""
        ...


class ControlServer:
    """Serves the control socket of one sim until cancelled."""

    def __init__(
        self, path: Path, agent: Nodes | None, *, control_plane: Drills | None = None
    ) -> None:
        self._path = path
        self._agent = agent
        self._cp = control_plane
        self._handlers: set[asyncio.Task[Any]] = set()

    async def run(self) -> None:
        """Serve until cancelled; removes the socket file on exit."""
        self._path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(self._handle, str(self._path))
        try:
            async with server:
                await server.serve_forever()
        finally:
            # A drill in progress (a pause) ends with the server: its ``finally`` lets the
            # paused process go on.
            for task in self._handlers:
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            self._path.unlink(missing_ok=True)

    async def _answer(self, req: dict[str, Any], reader: asyncio.StreamReader) -> dict[str, Any]:
        op, name = str(req.get("op")), str(req.get("node", ""))
        try:
            if op in ("restart", "pause"):
                return {"ok": await self._drill(op, req, reader)}
            if self._agent is None:
                return {"error": "this sim has no nodes"}
            if op == "nodes":
                return {"ok": await self._agent.node_table()}
            if name not in self._agent.specs:
                return {"error": f"no node named {name!r} in this sim"}
            await self._agent.act(op, name)
        except (ValueError, errors.SimError) as err:
            return {"error": str(err)}
        return {"ok": f"node {name}: {op} done"}

    async def _drill(self, op: str, req: dict[str, Any], reader: asyncio.StreamReader) -> Any:
        if self._cp is None:
            raise errors.SimError("this socket serves no control plane (a node host's)")
        name = drills.component(str(req.get("component", "")))
        if op == "restart":
            down = req.get("down", 0.0)
            if isinstance(down, bool) or not isinstance(down, (int, float)) or down < 0:
                raise errors.SimError(f"down time must be seconds >= 0, not {down!r}")
            done = await self._cp.restart(name, down_s=float(down), kill=bool(req.get("kill")))
            return done.to_doc()
        seconds = drills.check_pause(req.get("seconds"))
        gone = asyncio.Event()

        async def client_gone() -> None:
            # The client sends nothing after its request: end of stream means it half-closed
            # (interrupted) or went away altogether.
            with contextlib.suppress(OSError):
                await reader.read()
            gone.set()

        watcher = asyncio.create_task(client_gone())
        try:
            held = await self._cp.pause(name, seconds, resume=gone)
        finally:
            watcher.cancel()
        return {"component": name, "pausedSeconds": round(held, 3), "early": gone.is_set()}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            try:
                req = json.loads(await reader.readline())
                answer = await self._answer(req, reader)
            except (ValueError, OSError) as err:
                answer = {"error": f"bad request: {err}"}
            writer.write(json.dumps(answer).encode() + b"\n")
            with contextlib.suppress(OSError):
                await writer.drain()
        finally:
            writer.close()  # also when a stopping server cancels a drill
            self._handlers.discard(task)


def request(path: Path, payload: dict[str, Any], timeout: float = 120.0) -> Any:
    """Send one request to a running sim; returns ``ok`` or raises ``SimError``."""
    return request_interruptible(path, payload, timeout)[0]


def request_interruptible(
    path: Path, payload: dict[str, Any], timeout: float = 120.0
) -> tuple[Any, bool]:
    """``request``, and whether the user interrupted it (Ctrl-C, SIGINT).

    An interrupt while waiting half-closes the connection, which tells the server that its
    client is gone (a pause ends at once), and then still reads the server's answer, so the
    caller can report how the drill ended.
    """
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
        answer = bytearray()
        interrupted = False
        try:
            _read_answer(sock, answer)
        except KeyboardInterrupt:
            interrupted = True
            if not answer.endswith(b"\n"):
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(min(timeout, 30.0))
                _read_answer(sock, answer)
    return _result(bytes(answer)), interrupted


def _read_answer(sock: socket.socket, into: bytearray) -> None:
    while not into.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            return
        into += chunk


def _result(data: bytes) -> Any:
    if not data:
        raise errors.SimError("the sim's control socket closed without an answer")
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
