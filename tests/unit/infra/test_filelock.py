import asyncio
import os
from pathlib import Path

import pytest

from compute_domains.infra import errors, filelock


def test_lock_is_exclusive_between_two_holders(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "pu.lock"
    first = filelock.FileLock(path, timeout=0.2, poll_interval=0.01, owner="first")
    second = filelock.FileLock(path, timeout=0.2, poll_interval=0.01, owner="second")
    with first:
        assert first.locked
        assert f"pid={os.getpid()} owner=first" in path.read_text()
        with pytest.raises(filelock.LockTimeoutError) as caught:
            second.acquire()
    assert not first.locked
    assert not second.locked
    err = caught.value
    assert isinstance(err, errors.TemporaryError)
    assert err.path == path
    assert str(path) in str(err)
    assert "owner=first" in str(err)


def test_release_frees_the_lock_and_clears_the_holder_note(tmp_path: Path) -> None:
    path = tmp_path / "pu.lock"
    lock = filelock.FileLock(path, timeout=0.2, poll_interval=0.01)
    lock.acquire()
    lock.release()
    assert path.read_text() == ""
    lock.release()  # a second release is a no-op
    with filelock.FileLock(path, timeout=0.2, poll_interval=0.01, owner="next"):
        assert "owner=next" in path.read_text()


def test_lock_is_not_reentrant(tmp_path: Path) -> None:
    with filelock.FileLock(tmp_path / "l", timeout=0.1) as lock, pytest.raises(RuntimeError):
        lock.acquire()


def test_timeout_without_holder_note_says_unknown(tmp_path: Path) -> None:
    path = tmp_path / "l"
    holder = filelock.FileLock(path, timeout=0.1, poll_interval=0.01)
    holder.acquire()
    path.write_text("")  # as if the holder crashed before writing its note
    try:
        with pytest.raises(filelock.LockTimeoutError, match="holder unknown"):
            filelock.FileLock(path, timeout=0.05, poll_interval=0.01).acquire()
    finally:
        holder.release()


async def _waiting_on(path: Path) -> None:
    """Until a second descriptor of ours is open on ``path``: the waiter's thread opened the
    file and is in its poll loop (the holder has the first)."""

    def opened() -> int:
        fds = Path("/proc/self/fd")
        return sum(1 for fd in fds.iterdir() if _points_to(fd, path))

    async with asyncio.timeout(1):
        while opened() < 2:
            await asyncio.sleep(0.005)


def _points_to(link: Path, path: Path) -> bool:
    try:
        return link.readlink() == path
    except OSError:  # an fd closed while we list them
        return False


async def test_async_waiter_gets_the_lock_when_the_holder_releases(tmp_path: Path) -> None:
    path = tmp_path / "l"
    holder = filelock.FileLock(path, timeout=1, poll_interval=0.01)
    await holder.acquire_async()
    waiter = filelock.FileLock(path, timeout=2, poll_interval=0.01, owner="waiter")
    task = asyncio.create_task(waiter.acquire_async())
    await _waiting_on(path)
    assert not task.done()
    holder.release()
    await asyncio.wait_for(task, 1)
    assert waiter.locked
    waiter.release()


async def test_async_context_manager_releases_on_error(tmp_path: Path) -> None:
    lock = filelock.FileLock(tmp_path / "l", timeout=0.5, poll_interval=0.01)
    with pytest.raises(ValueError):
        async with lock:
            assert lock.locked
            raise ValueError("boom")
    assert not lock.locked


async def test_cancelled_async_acquire_does_not_leak_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "l"
    holder = filelock.FileLock(path, timeout=1, poll_interval=0.01)
    holder.acquire()
    waiter = filelock.FileLock(path, timeout=5, poll_interval=0.01)
    task = asyncio.create_task(waiter.acquire_async())
    await _waiting_on(path)
    holder.release()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not waiter.locked
    with filelock.FileLock(path, timeout=0.2, poll_interval=0.01):
        pass
