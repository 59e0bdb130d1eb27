"""IMEX stand-in links: a link waiting to retry a node that was down tries at once when that
node links to us (its hello on our server), instead of at the end of its backoff."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import random
import socket
import time
from collections.abc import AsyncIterator, Callable

import pytest

from compute_domains.infra import backoff
from compute_domains.sim import imex_config, imex_links, imex_log, imex_peers, imex_wire
from compute_domains.sim.imex_wire import Link

IPS = ("127.0.0.21", "127.0.0.22")
LONG_WAIT = backoff.Backoff(initial=60.0, maximum=60.0, jitter=0.0)
"""A retry far beyond this test's time: only a hello can bring the link up in time."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((IPS[0], 0))
        return int(s.getsockname()[1])


def _context(node_id: int, port: int, out: io.StringIO) -> imex_links.LinkContext:
    return imex_links.LinkContext(
        node_id=node_id,
        instance=f"instance-{node_id}",
        entries=IPS,
        version="1",
        server_port=port,
        bind_ip=IPS[node_id],
        grace_time=0,
        resolver=imex_config.Resolver(None),
        log=imex_log.ImexLog(out),
        faults=imex_config.Faults,
        rng=random.Random(node_id),
        reconnect=LONG_WAIT,
    )


async def _until(check: Callable[[], bool], what: str) -> None:
    try:
        async with asyncio.timeout(5):
            while not check():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def _peer_server(
    node_id: int,
    port: int,
    *,
    hanging: Callable[[], bool] = lambda: False,
    on_hello: Callable[[int], None] = lambda node: None,
) -> asyncio.Server:
    """Node ``node_id``'s IMEX server side, listening on its address."""
    peers = imex_peers.PeerServer(
        node_id=node_id,
        entries=IPS,
        version="1",
        log=imex_log.ImexLog(io.StringIO()),
        hanging=hanging,
        on_hello=on_hello,
    )
    return await asyncio.start_server(peers.handle, IPS[node_id], port)


@contextlib.asynccontextmanager
async def _running(*links: imex_links.OutgoingLink) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(link.run()) for link in links]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_hello_from_the_target_makes_a_waiting_link_retry_at_once() -> None:
    port = _free_port()
    out0 = io.StringIO()
    link0 = imex_links.OutgoingLink(_context(0, port, out0), 1)  # node 0's link to node 1
    server0 = await _peer_server(
        0, port, on_hello=lambda node: link0.peer_seen() if node == 1 else None
    )
    async with server0, _running(link0):
        # Node 1 is down: the first attempt fails and the link waits out its (long) backoff.
        await _until(lambda: "attempt #1" in out0.getvalue(), "first attempt")
        await asyncio.sleep(0.2)
        assert link0.state is Link.NEVER_CONNECTED
        # Node 1 comes up and links to node 0: node 0's link to it follows at once.
        link1 = imex_links.OutgoingLink(_context(1, port, io.StringIO()), 0)
        async with await _peer_server(1, port), _running(link1):
            await _until(lambda: link1.state is Link.CONNECTED, "node 1's link")
            await _until(lambda: link0.state is Link.CONNECTED, "node 0's link, woken")


async def test_without_a_hello_the_link_keeps_waiting() -> None:
    # The counterpart: with node 1 listening but never linking to us, the long backoff holds.
    port = _free_port()
    out0 = io.StringIO()
    link0 = imex_links.OutgoingLink(_context(0, port, out0), 1)
    async with _running(link0):
        await _until(lambda: "attempt #1" in out0.getvalue(), "first attempt")
        await asyncio.sleep(0.2)
        async with await _peer_server(1, port):
            await asyncio.sleep(0.5)
            assert link0.state is Link.NEVER_CONNECTED


def _fast_pings(port: int) -> imex_links.LinkContext:
    return dataclasses.replace(
        _context(0, port, io.StringIO()), ping_interval=0.1, ping_timeout=0.5
    )


@pytest.mark.slow_unit(5, "holds its event loop for 2 s, as a starved node host's is")
async def test_a_starved_loop_is_not_a_hung_peer() -> None:
    port = _free_port()
    link = imex_links.OutgoingLink(_fast_pings(port), 1)
    async with await _peer_server(1, port), _running(link):
        await _until(lambda: link.state is Link.CONNECTED, "the link")
        for _ in range(2):
            time.sleep(1.0)  # the loop is held past the ping timeout: nothing could answer
            await asyncio.sleep(0.3)
        assert link.state is Link.CONNECTED
        assert link.times_connected == 1


async def test_a_peer_that_stops_answering_is_still_lost() -> None:
    port = _free_port()
    hung = False
    link = imex_links.OutgoingLink(_fast_pings(port), 1)
    async with await _peer_server(1, port, hanging=lambda: hung), _running(link):
        await _until(lambda: link.state is Link.CONNECTED, "the link")
        hung = True
        await _until(lambda: link.state is not Link.CONNECTED, "the hung peer's link lost")


def test_ping_due_is_the_next_point_of_the_daemons_grid() -> None:
    assert imex_links.ping_due(10.3, 1.0, 0.25) == pytest.approx(11.25)
    assert imex_links.ping_due(10.25, 1.0, 0.25) == pytest.approx(11.25)  # strictly after now
    assert imex_links.ping_due(0.1, 1.0, 0.25) == pytest.approx(0.25)
    assert imex_links.ping_due(7.0, 0.5, 0.0) == pytest.approx(7.5)


async def _ping_recorder(node_id: int, port: int, times: list[float]) -> asyncio.Server:
    """Node ``node_id``'s server side that notes when each ping arrives."""
    loop = asyncio.get_running_loop()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = await imex_wire.recv(reader)
        assert hello is not None
        welcome = {"t": "welcome", "node": node_id, "map": list(IPS), "version": "1"}
        await imex_wire.send(writer, welcome)
        while (message := await imex_wire.recv(reader)) is not None:
            if message["t"] == "ping":
                times.append(loop.time())
                await imex_wire.send_frame(writer, imex_wire.PONG)
        writer.close()

    return await asyncio.start_server(handle, IPS[node_id], port)


async def test_the_links_of_one_daemon_ping_at_the_same_moments() -> None:
    # Links that connect half an interval apart still ping together, on the daemon's grid: one
    # wake-up of its loop sends them all.
    port = _free_port()
    ctx = dataclasses.replace(
        _context(0, port, io.StringIO()), ping_interval=0.2, ping_timeout=2.0, ping_phase=0.05
    )
    to_self: list[float] = []
    to_peer: list[float] = []
    link_self = imex_links.OutgoingLink(ctx, 0)
    link_peer = imex_links.OutgoingLink(ctx, 1)
    server0 = await _ping_recorder(0, port, to_self)
    server1 = await _ping_recorder(1, port, to_peer)
    async with server0, server1, _running(link_self):
        await _until(lambda: len(to_self) >= 2, "pings on the first link")
        await asyncio.sleep(0.1)
        async with _running(link_peer):
            await _until(lambda: len(to_peer) >= 7, "pings on the second link")
    # Each grid ping of the second link (its first goes at once) comes with one of the first's;
    # without the shared grid they would be half an interval (0.1 s) apart. The median allows
    # for one reading that a busy machine delayed.
    later_self = [t for t in to_self if t > to_peer[0] + 0.01]
    gaps = sorted(min(abs(t - u) for u in later_self) for t in to_peer[1:6])
    assert gaps[2] < 0.04, (gaps, to_peer, later_self)
