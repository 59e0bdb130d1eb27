"""IMEX stand-in frames: the prebuilt ping/pong frames are the encoder's bytes, and their bodies
decode (without the JSON parser) to what the parser gives, a fresh message each time."""

from __future__ import annotations

import json

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
