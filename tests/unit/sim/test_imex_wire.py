"""IMEX stand-in frames: the prebuilt ping/pong frames are the encoder's bytes, and their bodies
decode (without the JSON parser) to what the parser gives, a fresh message each time."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest

from compute_domains.sim import imex_wire


@pytest.mark.parametrize(("frame", "kind"), [(imex_wire.PING, "ping"), (imex_wire.PONG, "pong")])
def test_prebuilt_frames_are_the_encoded_messages(frame: bytes, kind: str) -> None:
    assert frame == imex_wire.encode({"t": kind})
    body = frame[imex_wire.HEADER_SIZE :]
    assert imex_wire.body_size(frame[: imex_wire.HEADER_SIZE]) == len(body)
    assert imex_wire.decode(body) == json.loads(body) == {"t": kind}


def test_a_decoded_ping_is_a_fresh_message() -> None:
    body = imex_wire.PING[imex_wire.HEADER_SIZE :]
    first = imex_wire.decode(body)
    first["t"] = "changed"
    assert imex_wire.decode(body) == {"t": "ping"}


def test_a_body_in_a_bytearray_decodes_too() -> None:
    # A reader may hand over a bytearray, which cannot be a dict key.
    body = bytearray(imex_wire.PONG[imex_wire.HEADER_SIZE :])
    assert imex_wire.decode(body) == {"t": "pong"}  # type: ignore[arg-type]
    assert imex_wire.decode(bytearray(b'{"t":"query"}')) == {"t": "query"}  # type: ignore[arg-type]


async def test_a_connection_from_a_node_address_leaves_its_port_to_connect() -> None:
    """The source is the node's address, and the port is not reserved at bind time: with
    thousands of virtual nodes in one kernel, ports reserved by ``bind((ip, 0))`` (and their
    TIME_WAITs) starved every other connection of the machine (EADDRNOTAVAIL)."""
    seen: list[str] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("peername")[0])
        await imex_wire.close(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        _, writer = await imex_wire.connect_from("127.0.0.7", "127.0.0.1", port)
        sock = writer.get_extra_info("socket")
        no_port = sock.getsockopt(socket.IPPROTO_IP, imex_wire.IP_BIND_ADDRESS_NO_PORT)
        source = writer.get_extra_info("sockname")[0]
        await imex_wire.close(writer)
        _, plain = await imex_wire.connect_from(None, "127.0.0.1", port)
        await imex_wire.close(plain)
        async with asyncio.timeout(5):
            while len(seen) < 2:
                await asyncio.sleep(0.01)
    assert no_port == 1
    assert source == "127.0.0.7"
    assert seen == ["127.0.0.7", "127.0.0.1"]
