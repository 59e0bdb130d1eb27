"""The kubelet's SPDY/3.1 side and exec protocol pieces (the real thing is tested with kubectl in
tests/integration/sim/test_nodes.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import struct
import zlib

import pytest

from compute_domains.sim.kubelet import execserver, spdy


def test_the_header_dictionary_is_the_protocols() -> None:
    """SPDY/3 §2.6.10.1: 1,423 bytes; a wrong byte breaks every header block from Go clients."""
    data = spdy.dictionary()
    assert len(data) == 1423
    assert hashlib.sha256(data).hexdigest() == (
        "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02"
    )


async def _frame(reader: asyncio.StreamReader) -> tuple[bool, int, int, bytes]:
    """(control?, type or stream id, flags, payload) of the next frame."""
    word, flags_len = struct.unpack(">II", await reader.readexactly(8))
    payload = await reader.readexactly(flags_len & 0xFFFFFF)
    control = bool(word & 0x80000000)
    return control, (word & 0xFFFF) if control else word, flags_len >> 24, payload


async def test_a_session_answers_streams_carries_data_and_pings() -> None:
    ours, theirs = socket.socketpair()
    s_reader, s_writer = await asyncio.open_connection(sock=ours)
    c_reader, c_writer = await asyncio.open_connection(sock=theirs)
    session = spdy.Session(s_reader, s_writer)
    opened: list[spdy.Stream] = []
    served = asyncio.create_task(session.run(opened.append))
    deflate = zlib.compressobj(zdict=spdy.dictionary())
    for sid, kind in ((1, "error"), (3, "stdout")):
        block = deflate.compress(spdy.encode_headers({"streamType": kind}))
        block += deflate.flush(zlib.Z_SYNC_FLUSH)
        c_writer.write(spdy.control_frame(1, 0, struct.pack(">IIH", sid, 0, 0) + block))
        control, kind_no, _, payload = await _frame(c_reader)
        assert (control, kind_no, struct.unpack(">I", payload[:4])[0]) == (True, 2, sid)
    assert [(s.id, s.headers) for s in opened] == [
        (1, {"streamtype": "error"}),
        (3, {"streamtype": "stdout"}),
    ]
    c_writer.write(spdy.data_frame(1, b"in", fin=True))
    assert await opened[0].read_all() == b"in"
    c_writer.write(spdy.control_frame(6, 0, struct.pack(">I", 7)))
    assert await _frame(c_reader) == (True, 6, 0, struct.pack(">I", 7))
    await session.send(opened[1], b"out", fin=True)
    assert await _frame(c_reader) == (False, 3, 1, b"out")
    c_writer.write(spdy.control_frame(7, 0, struct.pack(">II", 3, 0)))
    await asyncio.wait_for(served, 5)
    for w in (c_writer, s_writer):
        w.close()


def test_exec_options_are_read_with_the_kubelets_parameter_names() -> None:
    query = {"command": ["sh", "-c", "true"], "output": ["1"], "error": ["1"], "input": ["1"]}
    opts = execserver.ExecOptions.from_query(query)
    assert (opts.command, opts.stdin, opts.stdout, opts.stderr, opts.tty) == (
        ("sh", "-c", "true"),
        True,
        True,
        True,
        False,
    )
    assert opts.streams("v4.channel.k8s.io") == {"error", "stdin", "stdout", "stderr"}
    tty = execserver.ExecOptions.from_query({"command": ["sh"], "output": ["1"], "tty": ["1"]})
    assert tty.streams("v4.channel.k8s.io") == {"error", "stdout", "resize"}
    with pytest.raises(execserver.RequestError):
        execserver.ExecOptions.from_query({"output": ["1"]})


def test_protocol_negotiation_takes_the_clients_first_served_choice() -> None:
    offered = ["v5.channel.k8s.io", "v3.channel.k8s.io", "v4.channel.k8s.io"]
    assert execserver.negotiate(offered) == "v3.channel.k8s.io"
    with pytest.raises(execserver.RequestError) as err:
        execserver.negotiate(["channel.k8s.io"])
    assert err.value.status.startswith("403")


def test_a_non_zero_exit_is_a_status_kubectl_turns_into_its_exit_code() -> None:
    """client-go reads the code from a cause of reason ``ExitCode`` (Go's ``StatusCause.Type``
    is serialised as ``reason``)."""
    assert execserver.status(("true",), 0) == {"metadata": {}, "status": "Success"}
    failed = json.loads(json.dumps(execserver.status(("sh", "-c", "exit 3"), 3)))
    assert (failed["status"], failed["reason"]) == ("Failure", "NonZeroExitCode")
    assert failed["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
