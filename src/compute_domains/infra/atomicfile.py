"""Atomic file writes: readers see the old file or the new one, never half of either.

Write to a temporary file in the same folder, fsync it, rename it over the target, then fsync
the folder so the rename itself survives a crash. Used for every file another process or a
restarted process reads: checkpoints, CDI specs, IMEX configs, state records.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes | str, *, mode: int = 0o644, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically and durably (creates parent folders).

    ``durable=False`` skips the two fsyncs (file and folder): still atomic for readers, for
    files nobody needs after a power cut (a simulated node's stand-ins, rewritten at each start).
    """
    payload = data.encode() if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_text_or_none(path: Path) -> str | None:
    """The file's text, or None when it does not exist."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
