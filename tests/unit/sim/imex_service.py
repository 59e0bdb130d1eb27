"""A stand-in IMEX command service for the ``nvidia-imex-ctl`` tests: one TCP port on 127.0.0.1
that answers every framed request with the same row."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

from compute_domains.sim import imex_wire


@contextlib.contextmanager
def answering(row: dict[str, Any]) -> Iterator[int]:
    """Serve ``row`` to every request until the block ends; yields the port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                header = conn.recv(imex_wire.HEADER_SIZE)
                conn.recv(imex_wire.body_size(header))
                conn.sendall(imex_wire.encode(row))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        # close() alone does not wake a thread blocked in accept() on Linux; shutdown() does
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)
    assert not thread.is_alive()
