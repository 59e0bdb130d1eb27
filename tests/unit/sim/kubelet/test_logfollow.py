"""Following a container's log: output as it is written, and an end when the container ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

from compute_domains.sim.kubelet import logfollow


async def test_follow_sends_writes_as_they_come_and_ends_after_the_last_one(
    tmp_path: Path,
) -> None:
    log = tmp_path / "c.log"
    log.write_bytes(b"before\n")
    got: list[bytes] = []
    seen = asyncio.Event()

    async def send(chunk: bytes) -> None:
        got.append(chunk)
        seen.set()

    ended: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    follower = asyncio.create_task(logfollow.follow(log, 3, send, ended, never))
    await asyncio.wait_for(seen.wait(), 5)
    assert b"".join(got) == b"ore\n"
    seen.clear()
    with log.open("ab") as fh:
        fh.write(b"during\n")
    await asyncio.wait_for(seen.wait(), 5)  # woken by the write, not by the end
    assert not follower.done()
    with log.open("ab") as fh:
        fh.write(b"last words\n")  # written as the container ends
    ended.set_result(0)
    await asyncio.wait_for(follower, 5)
    assert b"".join(got) == b"ore\nduring\nlast words\n"


async def test_follow_of_a_stopped_container_sends_its_log_and_ends(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_bytes(b"all of it\n")
    got: list[bytes] = []

    async def send(chunk: bytes) -> None:
        got.append(chunk)

    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    await asyncio.wait_for(logfollow.follow(log, 0, send, None, never), 5)
    assert got == [b"all of it\n"]


async def test_follow_ends_when_the_client_leaves(tmp_path: Path) -> None:
    log = tmp_path / "c.log"
    log.write_bytes(b"")

    async def send(chunk: bytes) -> None:
        raise AssertionError("nothing was written")

    running: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    left: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    follower = asyncio.create_task(logfollow.follow(log, 0, send, running, left))
    left.set_result(b"")
    await asyncio.wait_for(follower, 5)
    assert running.cancelled(), "the wait for the container's end is given up"
