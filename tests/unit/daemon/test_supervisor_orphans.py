"""A supervised child never outlives a daemon that is killed outright (SIGKILL, OOM)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

PARENT = textwrap.dedent(
    """
    import asyncio, signal, sys
    from compute_domains.daemon import supervisor

    async def main() -> None:
        settings = supervisor.SupervisorSettings(parent_death_signal={signal})
        sup = supervisor.Supervisor(["sleep", "60"], settings=settings)
        task = asyncio.create_task(sup.run())
        await sup.start()
        print(sup.pid, flush=True)
        await task

    asyncio.run(main())
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


async def _child_of_killed_parent(signal_expr: str) -> int:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PARENT.format(signal=signal_expr),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    child = int((await asyncio.wait_for(proc.stdout.readline(), 10)).decode())
    assert _alive(child)
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    return child


async def test_the_child_dies_with_a_killed_parent() -> None:
    child = await _child_of_killed_parent("signal.SIGKILL")
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not _alive(child)


async def test_without_the_setting_the_child_is_left_alone() -> None:
    child = await _child_of_killed_parent("None")
    try:
        # An absence: the parent is reaped, so a parent-death signal would already be pending;
        # the child must stay alive for as long as the other test gives its death to show.
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            assert _alive(child)
            await asyncio.sleep(0.02)
    finally:
        os.kill(child, signal.SIGKILL)
