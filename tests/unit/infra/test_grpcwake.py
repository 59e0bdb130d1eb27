"""grpcwake: grpc.aio completions are not throttled to one per loop iteration."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import grpc
import pytest

from compute_domains.infra import grpcwake

CALLS = 1500
"""Enough completions to fill the wake-up socket pair's buffer (about 270 bytes) many times."""


async def _iterations_to_finish(tmp_path: Path, *, wrap: bool) -> int:
    """Loop iterations a busy loop needs to see ``CALLS`` failed calls through."""
    async with grpc.aio.insecure_channel(f"unix:{tmp_path}/nobody.sock") as channel:
        if wrap:
            assert grpcwake.unthrottle()
            assert grpcwake.unthrottle()  # idempotent
        method = channel.unary_unary("/t.T/M")
        calls = [asyncio.ensure_future(method(b"", timeout=60)) for _ in range(CALLS)]
        await asyncio.sleep(0)  # every call is started ...
        time.sleep(1.0)  # ... then the loop is held while the core fails them all
        iterations = 0
        while not all(c.done() for c in calls):
            time.sleep(0.001)  # an iteration of a busy loop costs something
            await asyncio.sleep(0)
            iterations += 1
        errors = [c.exception() for c in calls]
        assert {e.code() for e in errors if isinstance(e, grpc.aio.AioRpcError)} == {
            grpc.StatusCode.UNAVAILABLE
        }
        assert all(isinstance(e, grpc.aio.AioRpcError) for e in errors)
        return iterations


@pytest.mark.slow_unit(
    8, "two runs that each hold the loop 1 s; the unwrapped one takes ~1,300 iterations of 1 ms"
)
async def test_a_busy_loop_gets_every_queued_completion_at_once(tmp_path: Path) -> None:
    # The control run first, on this loop before its reader is wrapped: it shows the stall the
    # wrapper removes (grpc hands over one completion per iteration once its wake-up buffer is
    # full: measured 1,258 iterations, wrapped 10), so the wrapped run's bound means something.
    unwrapped = await _iterations_to_finish(tmp_path, wrap=False)
    wrapped = await _iterations_to_finish(tmp_path, wrap=True)
    assert unwrapped > CALLS // 2, (unwrapped, wrapped)
    assert wrapped < CALLS // 10, (unwrapped, wrapped)


def test_unthrottle_without_grpc_reader_changes_nothing() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert grpcwake.unthrottle(loop) is False
    finally:
        loop.close()


@pytest.mark.parametrize("waiting", [0, 1, 5])
def test_pending_bytes_counts_unread_bytes(waiting: int) -> None:
    a, b = socket.socketpair()
    with a, b:
        a.send(b"x" * waiting)
        assert grpcwake.pending_bytes(b.fileno()) == waiting
