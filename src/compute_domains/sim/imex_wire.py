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

import asyncio
import contextlib
import enum
import socket

# The frame codec lives in ``imex_frame`` (all that ``nvidia-imex-ctl -q`` imports); it is
# re-exported here for everything else.
from compute_domains.sim.imex_frame import HEADER_SIZE as HEADER_SIZE
from compute_domains.sim.imex_frame import MAX_FRAME as MAX_FRAME
from compute_domains.sim.imex_frame import PING as PING
from compute_domains.sim.imex_frame import PONG as PONG
from compute_domains.sim.imex_frame import Message as Message
from compute_domains.sim.imex_frame import ProtocolError as ProtocolError
from compute_domains.sim.imex_frame import body_size as body_size
from compute_domains.sim.imex_frame import decode as decode
from compute_domains.sim.imex_frame import encode as encode

TYPE_CHECKING = False  # not typing's (a few ms): the peers' and the daemon's start pay for it
if TYPE_CHECKING:
    import asyncio
    from collections.abc import Sequence
# asyncio is imported where it is used at run time (``recv``), as the daemon imports it anyway.


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
        header = await reader.readexactly(HEADER_SIZE)
    except asyncio.IncompleteReadError as err:
        if err.partial:
            raise ProtocolError("truncated frame header") from err
        return None
    try:
        body = await reader.readexactly(body_size(header))
    except asyncio.IncompleteReadError as err:
        raise ProtocolError("truncated or malformed frame") from err
    return decode(body)


async def close(writer: asyncio.StreamWriter) -> None:
    """Close a stream, ignoring errors of an already broken connection."""
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
"""Linux's socket option (``linux/in.h``); Python 3.11's ``socket`` does not name it."""


async def connect_from(
    bind_ip: str | None, address: str, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to ``address:port`` whose source is ``bind_ip`` (the node's own address,
    as a real node's IMEX dials from it); the OS's choice without one.

    The source port is left to ``connect`` (``IP_BIND_ADDRESS_NO_PORT``): a plain
    ``bind((ip, 0))`` takes an ephemeral port for itself alone, which no other connection of
    the machine may use until the socket and its TIME_WAIT are gone. On a real node that is
    its own kernel's business; in the simulator every virtual node shares one kernel, and at
    4,608 nodes the stand-ins' peer connections held so many that the machine's connections to
    the API server failed with EADDRNOTAVAIL (issue 28, 16-core machine, session 18).
    """
    if not bind_ip:
        return await asyncio.open_connection(address, port)
    family = socket.AF_INET6 if ":" in bind_ip else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if family == socket.AF_INET:
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        sock.bind((bind_ip, 0))
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (address, port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)
