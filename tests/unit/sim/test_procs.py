"""A container's processes end with it: what its first process forked does not outlive it."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from compute_domains.sim import procs


async def _forked(tmp_path: Path, script: str) -> tuple[procs.Child, int]:
    """Start ``script`` as a group leader (``setsid`` execs in place); the pid it forked."""
    pidfile = tmp_path / "forked.pid"
    child = await procs.start(
        "c",
        [shutil.which("setsid") or "setsid", "sh", "-c", script.format(pidfile=pidfile)],
        log_path=tmp_path / "c.log",
        group=True,
    )
    async with asyncio.timeout(10):
        while not pidfile.exists() or not pidfile.read_text().strip():
            await asyncio.sleep(0.05)
    return child, int(pidfile.read_text())


async def _gone(pid: int) -> bool:
    async with asyncio.timeout(10):
        while procs.pid_alive(pid):
            await asyncio.sleep(0.05)
    return True


@pytest.mark.parametrize("grace", [0.0, 5.0])
async def test_stopping_a_container_ends_what_it_forked(tmp_path: Path, grace: float) -> None:
    child, forked = await _forked(tmp_path, "sleep 300 & echo $! > {pidfile}; wait")
    assert procs.pid_alive(forked)
    await child.stop(grace)
    assert await _gone(forked)


async def test_a_container_whose_first_process_exits_takes_the_rest_along(tmp_path: Path) -> None:
    # The first process ends on its own; the background sleep would be adopted by init.
    child, forked = await _forked(tmp_path, "sleep 300 & echo $! > {pidfile}; exit 3")
    assert await child.proc.wait() == 3
    child.end_group()
    assert await _gone(forked)
