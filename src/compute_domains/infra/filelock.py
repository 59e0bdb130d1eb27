"""Cross-process exclusive file lock (``fcntl.flock``) with a timeout; async through a thread.

The plugin holds one node-local lock file around every prepare and unprepare so that a second
plugin instance on the same node (a rolling update) never works on claims at the same time.

Invariants:
- The lock belongs to an open file description: two ``FileLock`` objects on one path exclude each
  other even inside one process, and a crashed holder releases the lock with its last descriptor.
- Taking the lock polls ``flock(LOCK_EX | LOCK_NB)`` every ``poll_interval`` seconds until
  ``timeout``; only "would block" is retried, any other OS error is raised at once.
- The holder writes one line describing itself (pid, owner label, time) into the lock file, so a
  waiter that times out can name who holds it. The file is emptied again on release; a stale line
  left by a crashed holder is harmless because the lock itself is free then.
- A cancelled ``acquire_async`` never leaks the lock: the waiting thread is told to stop, and if it
  had just won the lock, the lock is released before the cancellation propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import fcntl
import os
import threading
import time
from pathlib import Path
from types import TracebackType

from compute_domains.infra import errors


class LockTimeoutError(errors.TemporaryError):
    """The lock was still held by someone else when the timeout ran out."""

    def __init__(self, path: Path, timeout: float, holder: str) -> None:
        who = holder or "holder unknown"
        super().__init__(f"timed out after {timeout:g}s waiting for lock {path} (held by: {who})")
        self.path = path
        self.timeout = timeout
        self.holder = holder


class _Abandoned(Exception):
    """Internal: the waiting thread was told to give up (its caller was cancelled)."""


class FileLock:
    """One exclusive lock on ``path``; not re-entrant.

    Use ``with lock:`` from synchronous code or ``async with lock:`` from the event loop (the
    blocking wait then runs in a worker thread).
    """

    def __init__(
        self,
        path: Path,
        *,
        timeout: float = 10.0,
        poll_interval: float = 0.1,
        owner: str = "",
    ) -> None:
        """Describe the lock; no IO happens until it is acquired.

        Args:
            path: the lock file; created (mode 0644) if missing, parent folders too.
            timeout: seconds to wait before giving up with ``LockTimeoutError``.
            poll_interval: seconds between attempts while someone else holds it.
            owner: a label written into the lock file while held, shown to waiters that time out.
        """
        self._path = path
        self._timeout = timeout
        self._poll = poll_interval
        self._owner = owner
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        """The lock file."""
        return self._path

    @property
    def locked(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, waiting up to the timeout (blocks the calling thread).

        Raises:
            LockTimeoutError: someone else still held it when the timeout ran out.
            OSError: the file cannot be opened or locked for another reason.
            RuntimeError: this object already holds the lock.
        """
        self._acquire(threading.Event())

    async def acquire_async(self) -> None:
        """Take the lock without blocking the event loop; same errors as ``acquire``."""
        abandon = threading.Event()
        waiter = asyncio.ensure_future(asyncio.to_thread(self._acquire, abandon))
        try:
            await asyncio.shield(waiter)
        except asyncio.CancelledError:
            abandon.set()
            # The thread notices within one poll interval; wait for it so the lock cannot be
            # won after we return, and give it back if it was won in the meantime.
            await asyncio.wait([waiter])
            if not waiter.cancelled() and waiter.exception() is None:
                self.release()
            raise

    def release(self) -> None:
        """Give the lock back; a no-op when not held."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):  # only the holder note; the close below unlocks
            os.ftruncate(fd, 0)
        os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    async def __aenter__(self) -> FileLock:
        await self.acquire_async()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def _acquire(self, abandon: threading.Event) -> None:
        if self._fd is not None:
            raise RuntimeError(f"lock {self._path} is already held by this object")
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            deadline = time.monotonic() + self._timeout
            while not _try_lock(fd):
                if time.monotonic() >= deadline:
                    raise LockTimeoutError(self._path, self._timeout, _read_holder(self._path))
                if abandon.wait(self._poll):
                    raise _Abandoned()
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._write_holder(fd)

    def _write_holder(self, fd: int) -> None:
        since = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        note = f"pid={os.getpid()} owner={self._owner or '-'} since={since}\n"
        # The note only helps diagnostics; failing to write it must not fail the lock.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, note.encode(), 0)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


def _read_holder(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""
