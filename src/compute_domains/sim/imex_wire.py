"""Wire format and vocabulary of the simulated IMEX service: frames, local states, link states.

Peers and ``nvidia-imex-ctl`` talk over TCP (or a Unix socket for the command service) with
length-prefixed frames: a 4-byte big-endian length, then a UTF-8 JSON object with a ``t`` (type)
key. This stands in for IMEX's gRPC; only the observable behaviour (who is connected to whom, what
the command service answers) matters.

Peer port messages: ``hello`` (from, instance, map, domain, version) → ``welcome`` (node, map,
domain, version); then ``ping`` → ``pong``; the server side may send ``shutdown`` (from,
instance, domain) before closing. A stopping daemon also sends one ``shutdown`` frame, alone on a
fresh connection, to every listed peer's address. ``domain`` is the sender's node-map
fingerprint (:func:`domain_fingerprint`): what IMEX keys "same domain" on (upstream #1447).
Command port messages: ``query`` → ``status`` (this node's row); ``domain`` → ``report`` (every
node's row, gathered by the local daemon from its peers' command ports).
"""

from __future__ import annotations

import contextlib
import enum
import json
import struct

TYPE_CHECKING = False  # not typing's: `nvidia-imex-ctl -q` never imports typing (a few ms)
if TYPE_CHECKING:
    import asyncio
    from collections.abc import Sequence
    from typing import Any
# asyncio is imported where it is used at run time: ``nvidia-imex-ctl -q`` is a probe that runs
# every second on every node and only needs ``encode``/``decode_header`` (tens of ms saved).

MAX_FRAME = 1 << 20
_HEADER = struct.Struct(">I")

Message = dict[str, "Any"]


class LocalState(enum.StrEnum):
    """Daemon states as ``nvidia-imex-ctl -q`` prints them (DCGM numbers them 0..7 in order)."""

    INITIALIZING = "INITIALIZING"
    STARTING_AUTH_SERVER = "STARTING_AUTH_SERVER"
    WAITING_FOR_PEERS = "WAITING_FOR_PEERS"
    WAITING_FOR_RECOVERY = "WAITING_FOR_RECOVERY"
    INIT_GPU = "INIT_GPU"
    READY = "READY"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    UNAVAILABLE = "UNAVAILABLE"


class Link(enum.StrEnum):
    """State of one node's connection to another: value = JSON spelling, ``code`` = table cell.

    CONNECTED, NEVER_CONNECTED and INVALID are the observed JSON spellings; the others are ours
    (the real spellings are undocumented).
    """

    INVALID = "INVALID"
    NEVER_CONNECTED = "NEVER_CONNECTED"
    RECOVERING = "RECOVERING"
    DISCONNECTED = "DISCONNECTED"
    AUTHENTICATING = "AUTHENTICATING"
    VERSION_MISMATCH = "VERSION_MISMATCH"
    NODE_MAP_MISMATCH = "NODE_MAP_MISMATCH"
    CONNECTED = "CONNECTED"

    @property
    def code(self) -> str:
        """The cell text in the ``-N`` connectivity table."""
        return _CODES[self]


_CODES = {
    Link.INVALID: "I",
    Link.NEVER_CONNECTED: "N",
    Link.RECOVERING: "R",
    Link.DISCONNECTED: "D",
    Link.AUTHENTICATING: "A",
    Link.VERSION_MISMATCH: "!V!",
    Link.NODE_MAP_MISMATCH: "!M!",
    Link.CONNECTED: "C",
}


def domain_fingerprint(entries: Sequence[str]) -> str:
    """The fingerprint of a node map (the nodes file's entries, in order, id = position): equal
    maps, equal fingerprints. Two daemons whose maps are equal are one domain to IMEX, whoever
    they belong to; that is the whole check (upstream #1447)."""
    import hashlib

    return hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]


class ProtocolError(Exception):
    """A peer sent something that is not a valid frame."""


def encode(message: Message) -> bytes:
    """One frame for ``message``."""
    body = json.dumps(message, separators=(",", ":")).encode()
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(body)) + body


# Pings and pongs are most of the peer traffic (one of each per link and second, both ways):
# their frames are built once, and their bodies are recognised without the JSON parser. The
# bytes on the wire are exactly ``encode``'s.
PING = encode({"t": "ping"})
"""The ``ping`` frame."""
PONG = encode({"t": "pong"})
"""The ``pong`` frame."""
_KNOWN_BODIES = {
    frame[_HEADER.size :]: frame_type for frame, frame_type in ((PING, "ping"), (PONG, "pong"))
}


async def send(writer: asyncio.StreamWriter, message: Message) -> None:
    """Write one frame and wait until it is handed to the kernel."""
    await send_frame(writer, encode(message))


async def send_frame(writer: asyncio.StreamWriter, frame: bytes) -> None:
    """Write an encoded frame (``PING``, ``PONG``) and wait until it is handed to the kernel."""
    writer.write(frame)
    await writer.drain()


async def recv(reader: asyncio.StreamReader) -> Message | None:
    """Read one frame; None at a clean end of stream.

    Raises:
        ProtocolError: A truncated or malformed frame.
    """
    import asyncio

    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as err:
        if err.partial:
            raise ProtocolError("truncated frame header") from err
        return None
    try:
        body = await reader.readexactly(body_size(header))
    except asyncio.IncompleteReadError as err:
        raise ProtocolError("truncated or malformed frame") from err
    return decode(body)


HEADER_SIZE = _HEADER.size
"""Bytes of a frame header."""


def body_size(header: bytes) -> int:
    """The body length a frame header announces.

    Raises:
        ProtocolError: Larger than ``MAX_FRAME``.
    """
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    return int(size)


def decode(body: bytes) -> Message:
    """The message in a frame body.

    Raises:
        ProtocolError: Not JSON, or not an object with a string ``t``.
    """
    known = _KNOWN_BODIES.get(body) if type(body) is bytes else None
    if known is not None:
        return {"t": known}
    try:
        message = json.loads(body)
    except ValueError as err:
        raise ProtocolError("truncated or malformed frame") from err
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ProtocolError("frame is not a typed message")
    return message


async def close(writer: asyncio.StreamWriter) -> None:
    """Close a stream, ignoring errors of an already broken connection."""
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
