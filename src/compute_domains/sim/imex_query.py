"""``nvidia-imex-ctl -q`` at the cost of a native tool: the config's command endpoint and one query.

Every IMEX daemon's readiness is checked with ``nvidia-imex-ctl -c <cfg> -q`` (ours runs it
itself, NVIDIA's through its exec probes), several times per daemon while a domain forms. The
real tool is a native binary that starts in about a millisecond; the stand-in is a Python
program, so its start costs CPU that a real node would not spend, for every driver alike. This
module is what such a run needs and nothing more (no argparse, dataclasses, pathlib, asyncio, nor
``imex_wire``'s enums: the frame codec comes from ``imex_frame``; the driver root's wrapper
starts the interpreter without ``site`` or ``runpy``, ``driverroot.ctl_script``):
:func:`main` answers the command lines the drivers use (``-q`` with ``-c <cfg>`` and the
simulator's ``-t <ms>``, in any order) and returns None for anything else, which the full
``sim.imex`` entry then parses. The answers and exit statuses are the full tool's: the same
functions serve both (``imex_config`` reads the config and nodes file through
:func:`parse_config_text`, :func:`cmd_fields` and :func:`node_entries`; ``imex_ctlbase.query`` is
:func:`query`).
"""

from __future__ import annotations

import _socket  # socket.py's C half: the same calls without its enums and selectors (~3 ms a run)
import os
import sys

from compute_domains.sim import imex_frame

TYPE_CHECKING = False  # not typing's: importing typing costs the ctl's start a few ms
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import TextIO
# asyncio is imported inside the coroutines below (the in-process query of virtual nodes): a
# process-mode `-q` never runs them, and importing asyncio was two thirds of its CPU (measured:
# 0.06 s a run with it, on every node's check while a domain forms).

DEFAULT_CONFIG = "/etc/nvidia-imex/config.cfg"
"""The config ``nvidia-imex-ctl`` reads without ``-c``."""
DEFAULT_NODES_CONFIG = "/etc/nvidia-imex/nodes_config.cfg"
"""IMEX's default ``IMEX_NODE_CONFIG_FILE``."""
UNAVAILABLE = "UNAVAILABLE"
"""The state word of a daemon that does not say (and of an unreachable node in ``-N``)."""


class QueryError(Exception):
    """A failure to report, with the exit status to use."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def parse_config_text(text: str) -> dict[str, str]:
    """``KEY=value`` lines to a dict; comments, blank and malformed lines are skipped."""
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def config_int(values: Mapping[str, str], key: str, default: int) -> int:
    """An integer setting; missing, empty or malformed is ``default``."""
    value = values.get(key, "")
    try:
        return int(value) if value else default
    except ValueError:
        return default


def config_flag(values: Mapping[str, str], key: str, default: bool) -> bool:
    """A 0/1 setting."""
    return config_int(values, key, int(default)) != 0


def cmd_fields(values: Mapping[str, str]) -> tuple[bool, str, int | None, str]:
    """The command service settings: enabled, bind IP, TCP port (None: none), Unix socket path."""
    port = values.get("IMEX_CMD_PORT", "50005")
    return (
        config_flag(values, "IMEX_CMD_ENABLED", True),
        values.get("IMEX_CMD_BIND_INTERFACE_IP", ""),
        int(port) if port.isdigit() else None,
        values.get("IMEX_CMD_UNIX_DOMAIN_PATH", ""),
    )


def nodes_config_file(values: Mapping[str, str]) -> str:
    """``IMEX_NODE_CONFIG_FILE`` with IMEX's default."""
    return values.get("IMEX_NODE_CONFIG_FILE") or DEFAULT_NODES_CONFIG


def node_entries(text: str) -> list[str]:
    """The nodes file's entries in order (node ID = position): the first token of every line
    that is neither blank nor a ``#`` comment."""
    entries: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            entries.append(line.split()[0])
    return entries


Where = tuple[tuple[str, int] | None, str | None]
"""A command endpoint: (TCP (ip, port), Unix socket path), exactly one of them set."""


def endpoint_of(cmd: tuple[bool, str, int | None, str], config_path: str) -> Where:
    """The endpoint from :func:`cmd_fields` (QueryError when the service is off or unset)."""
    enabled, bind_ip, port, unix = cmd
    if not enabled:
        raise QueryError(f"IMEX command service is not enabled in {config_path}")
    if port is not None:
        return (bind_ip or "127.0.0.1", port), None
    if unix:
        return None, unix
    raise QueryError(f"No IMEX command service endpoint configured in {config_path}")


def describe(where: Where) -> str:
    """``ip:port`` or the socket path, as the messages name the endpoint."""
    tcp, unix = where
    return f"{tcp[0]}:{tcp[1]}" if tcp else str(unix)


def load(config_path: str) -> dict[str, str]:
    """The config's values, after checking its nodes file is readable (as the tool does).

    Raises:
        QueryError: either file cannot be read (the tool's wording, exit status 1).
    """
    try:
        with open(config_path, encoding="utf-8") as f:
            values = parse_config_text(f.read())
    except OSError as err:
        raise QueryError(f"Failed to open config file {config_path}: {err.strerror}") from err
    nodes = nodes_config_file(values)
    try:
        with open(nodes, encoding="utf-8") as f:
            f.read()
    except OSError as err:
        raise QueryError(f"Failed to read node configuration file {nodes}") from err
    return values


def _read_exactly(sock: _socket.socket, size: int) -> bytes:
    """``size`` bytes, or b"" at a clean end of stream before the first byte."""
    chunks: list[bytes] = []
    got = 0
    while got < size:
        chunk = sock.recv(size - got)
        if not chunk:
            if got:
                raise imex_frame.ProtocolError("truncated frame")
            return b""
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _connect_tcp(host: str, port: int, timeout: float | None) -> _socket.socket:
    """``socket.create_connection`` for the first address of ``host`` (the endpoint is an IP).

    The host goes to getaddrinfo as bytes: a str makes it load the IDNA codec (~5 ms a run).
    """
    info = _socket.getaddrinfo(host.encode(), port, 0, _socket.SOCK_STREAM)
    family, kind, proto, _, addr = info[0]
    sock = _socket.socket(family, kind, proto)
    try:
        sock.settimeout(timeout)
        sock.connect(addr)
    except BaseException:
        sock.close()
        raise
    return sock


def ask(where: Where, request: imex_frame.Message, timeout: float | None) -> imex_frame.Message:
    """One request and its answer over the command endpoint."""
    tcp, unix = where
    if tcp is not None:
        sock = _connect_tcp(*tcp, timeout)
    else:
        assert unix is not None
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(unix)
        except BaseException:
            sock.close()
            raise
    try:  # (a bare _socket.socket is no context manager)
        sock.sendall(imex_frame.encode(request))
        header = _read_exactly(sock, imex_frame.HEADER_SIZE)
        if not header:
            raise imex_frame.ProtocolError("connection closed without an answer")
        return imex_frame.decode(_read_exactly(sock, imex_frame.body_size(header)))
    finally:
        sock.close()


def query(where: Where, timeout: float | None, out: TextIO) -> None:
    """``-q``: print the local daemon's state word.

    Raises:
        QueryError: no daemon answered (the message to print).
    """
    try:
        reply = ask(where, {"t": "query"}, timeout)
    except (OSError, imex_frame.ProtocolError) as err:
        raise _failure(where, err) from err
    out.write(f"{reply.get('state', UNAVAILABLE)}\n")


async def aquery(where: Where, timeout: float | None, out: TextIO) -> None:
    """``query`` from a coroutine, on the event loop (virtual nodes: the daemon asks its own
    IMEX stand-in, a task of the same loop; a thread each held the loop's executor while the
    loop was busy, and 144 daemons' checks starved every other blocking call of the process).
    """
    import asyncio  # here, not at the top: see the imports above

    try:
        async with asyncio.timeout(timeout):
            reply = await _aask(where, {"t": "query"})
    except (OSError, imex_frame.ProtocolError) as err:
        raise _failure(where, err) from err
    out.write(f"{reply.get('state', UNAVAILABLE)}\n")


async def _aask(where: Where, request: imex_frame.Message) -> imex_frame.Message:
    import asyncio  # here, not at the top: see the imports above

    from compute_domains.sim import imex_wire  # its enums and asyncio helpers: not for `-q`

    tcp, unix = where
    if tcp is not None:
        reader, writer = await asyncio.open_connection(*tcp)
    else:
        assert unix is not None
        reader, writer = await asyncio.open_unix_connection(unix)
    try:
        await imex_wire.send(writer, request)
        reply = await imex_wire.recv(reader)
    finally:
        await imex_wire.close(writer)
    if reply is None:
        raise imex_frame.ProtocolError("connection closed without an answer")
    return reply


def _failure(where: Where, err: OSError | imex_frame.ProtocolError) -> QueryError:
    """The tool's message for a query that got no answer."""
    if isinstance(err, TimeoutError):
        reason = "timed out"
    elif isinstance(err, OSError) and err.errno:
        reason = os.strerror(err.errno)
    else:
        reason = str(err) or "timed out"
    return QueryError(f"Failed to query the IMEX command service at {describe(where)}: {reason}")


def _quick_args(argv: Sequence[str]) -> tuple[str, float | None] | None:
    """(config path, timeout) for ``-q [-c CFG] [-t MS]`` in any order; None for anything else."""
    args = list(argv)
    seen: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-q" and "-q" not in seen:
            seen["-q"] = ""
            i += 1
        elif arg in ("-c", "-t") and arg not in seen and i + 1 < len(args):
            value = args[i + 1]
            if value.startswith("-") or (arg == "-t" and not value.isdigit()):
                return None
            seen[arg] = value
            i += 2
        else:
            return None
    if "-q" not in seen:
        return None
    timeout = int(seen["-t"]) / 1000.0 if "-t" in seen else None
    return seen.get("-c", DEFAULT_CONFIG), timeout


def main(argv: Sequence[str]) -> int | None:
    """Run ``nvidia-imex-ctl`` with ``argv`` when it is a plain ``-q``; its exit status, or None
    when the full tool must parse the command line."""
    parsed = _quick_args(argv)
    if parsed is None:
        return None
    config_path, timeout = parsed
    try:
        where = endpoint_of(cmd_fields(load(config_path)), config_path)
        query(where, timeout, sys.stdout)
    except QueryError as failure:
        sys.stderr.write(f"{failure}\n")
        return failure.status
    return 0
