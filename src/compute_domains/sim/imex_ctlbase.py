"""The light half of the simulated ``nvidia-imex-ctl``: options, endpoint, config, ``-q``.

``nvidia-imex-ctl -q`` is what the daemon's readiness probe runs every second on every node, so
it is served synchronously here with plain sockets and never imports asyncio (which alone costs
about 80 ms of CPU per run); the real tool is a native binary that costs next to nothing, and
the simulator should not make probes look expensive. ``imex_ctl`` builds ``-N``/``-n`` on top.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path
from typing import Literal, TextIO

from compute_domains.sim import imex_config, imex_report, imex_wire

Action = Literal["q", "N", "n"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CtlOptions:
    """What one ``nvidia-imex-ctl`` invocation was asked to do."""

    action: Action
    config_path: Path
    tcp: tuple[str, int] | None = None
    unix: str | None = None
    json: bool = False
    host_names: bool = False
    timeout: float | None = None
    """Seconds to wait for the daemon; None waits indefinitely."""


class CtlError(Exception):
    """A failure to report, with the exit status to use."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the command service listens: TCP (ip, port) or a Unix socket path."""

    tcp: tuple[str, int] | None
    unix: str | None

    def __str__(self) -> str:
        return f"{self.tcp[0]}:{self.tcp[1]}" if self.tcp else str(self.unix)


def endpoint(opts: CtlOptions, config: imex_config.ImexConfig | None) -> Endpoint:
    """The command endpoint from ``-i``/``-u`` or the config (raises CtlError when none)."""
    if opts.tcp is not None or opts.unix is not None:
        return Endpoint(opts.tcp, opts.unix)
    assert config is not None
    if not config.cmd_enabled:
        raise CtlError(f"IMEX command service is not enabled in {config.path}")
    if config.cmd_port is not None:
        return Endpoint((config.cmd_bind_ip or "127.0.0.1", config.cmd_port), None)
    if config.cmd_unix_path:
        return Endpoint(None, config.cmd_unix_path)
    raise CtlError(f"No IMEX command service endpoint configured in {config.path}")


def load(
    opts: CtlOptions, *, nodes_needed: bool
) -> tuple[imex_config.ImexConfig | None, list[str]]:
    """The config and node entries the invocation needs (CtlError with the tool's wording)."""
    direct = opts.tcp is not None or opts.unix is not None
    if direct and not nodes_needed:
        return None, []
    try:
        config = imex_config.load_config(opts.config_path)
    except OSError as err:
        raise CtlError(f"Failed to open config file {opts.config_path}: {err.strerror}") from err
    try:
        entries = imex_config.read_nodes_file(config.node_config_file)
    except OSError as err:
        status = 255 if opts.action != "q" else 1
        raise CtlError(
            f"Failed to read node configuration file {config.node_config_file}", status
        ) from err
    return config, entries


def _ask_sync(
    where: Endpoint, request: imex_wire.Message, timeout: float | None
) -> imex_wire.Message:
    if where.tcp is not None:
        sock = socket.create_connection(where.tcp, timeout=timeout)
    else:
        assert where.unix is not None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(where.unix)
    with sock:
        sock.sendall(imex_wire.encode(request))
        header = _read_exactly(sock, imex_wire.HEADER_SIZE)
        if not header:
            raise imex_wire.ProtocolError("connection closed without an answer")
        return imex_wire.decode(_read_exactly(sock, imex_wire.body_size(header)))


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes, or b"" at a clean end of stream before the first byte."""
    chunks: list[bytes] = []
    got = 0
    while got < size:
        chunk = sock.recv(size - got)
        if not chunk:
            if got:
                raise imex_wire.ProtocolError("truncated frame")
            return b""
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def query(opts: CtlOptions, out: TextIO) -> None:
    """``-q``: print the local daemon's state word.

    Raises:
        CtlError: No config, no endpoint, or no daemon answered (the message to print).
    """
    config, _ = load(opts, nodes_needed=False)
    where = endpoint(opts, config)
    try:
        reply = _ask_sync(where, {"t": "query"}, opts.timeout)
    except (OSError, imex_wire.ProtocolError) as err:
        if isinstance(err, TimeoutError):
            reason = "timed out"
        elif isinstance(err, OSError) and err.errno:
            reason = os.strerror(err.errno)
        else:
            reason = str(err) or "timed out"
        raise CtlError(f"Failed to query the IMEX command service at {where}: {reason}") from err
    out.write(f"{reply.get('state', imex_report.UNAVAILABLE)}\n")
