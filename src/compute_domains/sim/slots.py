"""Address slots: sims running side by side on one machine never share a loopback address.

A sim supervisor takes the lowest free slot by holding an exclusive ``flock`` on
``/tmp/cd-sim-slots/<n>.lock`` for its whole life; the kernel drops the lock when the process
dies, so a killed sim never leaks its slot.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from compute_domains.sim import errors, topology

_DIR = Path("/tmp/cd-sim-slots")


def acquire(directory: Path = _DIR) -> tuple[int, int]:
    """Take the lowest free slot; returns (slot, fd) — keep the fd open while the sim lives."""
    directory.mkdir(parents=True, exist_ok=True)
    for slot in range(topology.SLOTS):
        fd = os.open(directory / f"{slot}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return slot, fd
    raise errors.SimError(
        f"all {topology.SLOTS} address slots are taken by running sims; "
        "stop one (`cdctl sim down --name ...`)"
    )
