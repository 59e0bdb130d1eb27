"""Frames of the simulated IMEX service: a 4-byte big-endian length, then a UTF-8 JSON object.

The frame codec alone (``struct`` and ``json``, nothing else): ``nvidia-imex-ctl -q``
(``imex_query``) needs only this, and every module it imports is paid on every check's start.
``imex_wire`` re-exports it with the service's vocabulary and the asyncio stream helpers.
"""

from __future__ import annotations

import json
import struct

TYPE_CHECKING = False  # not typing's: `nvidia-imex-ctl -q` never imports typing (a few ms)
if TYPE_CHECKING:
    from typing import Any

MAX_FRAME = 1 << 20
"""The largest frame body either side accepts (bytes)."""
_HEADER = struct.Struct(">I")

Message = dict[str, "Any"]
"""A decoded frame: a JSON object with a string ``t`` (its type)."""


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
