"""Keep grpc.aio's completion wake-ups from throttling a busy event loop.

grpc.aio (grpcio 1.85) hands completions from its poller thread to the event loop through a
socket pair: the poller writes one byte per completion, and the loop's reader reads *one* byte
per loop iteration, then handles every completion queued so far. When completions arrive faster
than the loop iterates, unread bytes pile up until the socket's send buffer is full (about 270
one-byte writes on Linux). The poller thread then blocks in ``write()``, and from then on the
whole process gets one gRPC completion per loop iteration. A node host with 144 in-process
plugins hit exactly that during an N = 288 formation: a send queue of 198,144 bytes on the
socket pair, the poller thread parked in ``write``, and every plugin's self-check ending in
``Deadline Exceeded`` while the loop was mostly idle (decision 0013).

:func:`unthrottle` wraps that reader so that each wake-up first reads every pending byte but
one, then lets grpc read the last one and drain its queue. No completion is lost: grpc's handler
always empties the whole queue, whatever the number of bytes. Where grpc's internals are not as
expected (another grpc version, another event loop) it changes nothing and says so.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import functools
import logging
import os
import termios
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

_GRPC_READER = "_handle_events"
"""Name of grpc.aio's wake-up reader (``PollerCompletionQueue._handle_events``)."""


def pending_bytes(fd: int) -> int:
    """Bytes waiting to be read on socket ``fd`` (``FIONREAD``)."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]


def _drain_then(fd: int, reader: Callable[..., Any], *args: Any) -> None:
    # Leave exactly one byte: grpc's reader does a non-blocking recv(1), which must not fail.
    extra = pending_bytes(fd) - 1
    if extra > 0:
        os.read(fd, extra)
    reader(*args)


def _is_grpc_reader(callback: Callable[..., Any]) -> bool:
    target = callback.func if isinstance(callback, functools.partial) else callback
    return getattr(target, "__name__", "") == _GRPC_READER and type(
        getattr(target, "__self__", None)
    ).__name__.endswith("CompletionQueue")


def unthrottle(loop: asyncio.AbstractEventLoop | None = None) -> bool:
    """Wrap grpc.aio's wake-up reader on ``loop`` (default: the running loop); idempotent.

    Call it once grpc.aio has bound the loop (after the first server or channel is created).

    Returns:
        True if the reader is wrapped (now or before), False if none was found.
    """
    loop = loop or asyncio.get_running_loop()
    selector = getattr(loop, "_selector", None)  # selector event loops only
    if selector is None:
        logger.debug("grpc wake-up reader not wrapped: %s has no selector", type(loop).__name__)
        return False
    for key in list(selector.get_map().values()):
        reader = key.data[0] if isinstance(key.data, tuple) else None
        callback = getattr(reader, "_callback", None)
        if reader is None or callback is None:
            continue
        if callback is _drain_then:
            return True
        if _is_grpc_reader(callback):
            loop.add_reader(key.fd, _drain_then, key.fd, callback, *reader._args)
            logger.debug("grpc wake-up reader on fd %d wrapped", key.fd)
            return True
    logger.debug("grpc wake-up reader not found on this loop; left as it is")
    return False
