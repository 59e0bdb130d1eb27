"""``kubectl logs --follow`` of a simulated container: its log file as it grows, until it ends.

A container's stdout and stderr are its log file itself (``containers.procs``), so what it writes is
in the file the moment it is written; nothing buffers it on the way. ``follow`` sends the file
on as it grows, woken by inotify (the kubelet's log reader waits on fsnotify the same way), and
returns after the container's last output once that container instance has ended (its command
exited, it was stopped, its pod deleted): the kubelet then ends the stream, and with it
``kubectl logs -f``. It also returns when the client goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

_IN_MODIFY = 0x2
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_CHUNK = 1 << 16


class _Watch:
    """An inotify watch for writes to one file (a readable fd while events are pending)."""

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if libc.inotify_add_watch(self.fd, str(path).encode(), _IN_MODIFY) < 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, f"inotify_add_watch {path}")

    async def changed(self) -> None:
        """Wait until the file was written to since the last call."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(self.fd, readable)
        try:
            await ready
        finally:
            loop.remove_reader(self.fd)
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 4096):
                pass

    def close(self) -> None:
        """Remove the watch."""
        os.close(self.fd)


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read()
    except FileNotFoundError:
        return b""


async def follow(
    path: Path,
    offset: int,
    send: Callable[[bytes], Awaitable[None]],
    ended: Awaitable[Any] | None,
    gone: Awaitable[Any],
) -> None:
    """Send ``path`` from ``offset`` on as it grows until ``ended`` (the container instance's
    end; None: it is not running) or ``gone`` (the client left) completes."""
    watch = _Watch(path)
    end = asyncio.ensure_future(ended) if ended is not None else None
    left = asyncio.ensure_future(gone)
    try:
        while True:
            # The watch exists since before the first read: a write after any read queues an
            # event that wakes the next wait, so none is lost.
            change = asyncio.ensure_future(watch.changed())
            data = _read_from(path, offset)
            if data:
                offset += len(data)
                await send(data)
            if end is None or end.done() or left.done():
                change.cancel()
                await asyncio.gather(change, return_exceptions=True)
                if end is not None and end.done() and not left.done():
                    # What the container wrote just before it ended.
                    tail = _read_from(path, offset)
                    if tail:
                        await send(tail)
                return
            await asyncio.wait({change, end, left}, return_when=asyncio.FIRST_COMPLETED)
            change.cancel()
            await asyncio.gather(change, return_exceptions=True)
    finally:
        waits = [t for t in (end, left) if t is not None]
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        watch.close()
