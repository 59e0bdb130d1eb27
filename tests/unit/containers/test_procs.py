"""A container's processes end with it: what its first process forked does not outlive it."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

from compute_domains.containers import procs, runtime


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


# A helper that leaves the container's process group and ignores SIGTERM, as a daemon's child
# may (NVIDIA's daemon starts nvidia-imex with a plain exec; a shell job gets a group of its own).
_ESCAPER = (
    "import os, signal, sys, time; os.setpgid(0, 0); signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(300)"
)


def _escaping(python: str) -> str:
    return f'{python} -c "{_ESCAPER}" {{pidfile}} & wait'


@pytest.mark.parametrize("grace", [0.0, 5.0])
async def test_stopping_a_container_ends_a_child_that_left_its_group(
    tmp_path: Path, grace: float
) -> None:
    child, forked = await _forked(tmp_path, _escaping(sys.executable))
    assert os.getpgid(forked) != child.pid, "the helper did not leave the container's group"
    await child.stop(grace)
    assert await _gone(forked)


async def test_a_container_killed_with_its_agent_is_ended_from_its_record(tmp_path: Path) -> None:
    """A killed sim supervisor takes its containers' first processes along (parent-death
    signal) but not what they started: ``kill_leftovers`` finds those by the container's
    recorded session and ends them (``cdctl sim down`` and the next ``sim up`` run it)."""
    rt = runtime.Runtime(runtime.RuntimeSettings(isolate=False), tmp_path / "containers")
    pidfile = tmp_path / "forked.pid"
    cfg = runtime.ContainerConfig(
        argv=("sh", "-c", _escaping(sys.executable).format(pidfile=pidfile)),
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    running = await rt.start("pod_c", cfg, tmp_path / "c.log")
    async with asyncio.timeout(10):
        while not pidfile.exists() or not pidfile.read_text().strip():
            await asyncio.sleep(0.05)
    forked = int(pidfile.read_text())
    os.kill(running.child.pid, signal.SIGKILL)  # what the parent-death signal does
    await running.child.proc.wait()
    assert procs.pid_alive(forked), "nothing left to clean: the test shows nothing"
    # Exactly the one helper: the shell was the container's first process and is gone already.
    assert runtime.kill_leftovers(tmp_path / "containers") == 1
    assert await _gone(forked)
    assert runtime.kill_leftovers(tmp_path / "containers") == 0
