"""Run a short program to its end with its output merged: the one shape of it in the project.

Used by the container runtime (exec probes, ``kubectl exec``) and by the daemon's launcher (its
own IMEX checks): stdin closed, stdout and stderr in one pipe, the program killed when it runs
past ``timeout`` and exit status 124 reported for it, as ``timeout(1)`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence


async def run_merged(
    argv: Sequence[str], timeout: float, *, timed_out_output: str = ""
) -> tuple[int, str]:
    """(exit status, merged output); ``(124, timed_out_output)`` after ``timeout`` seconds.

    Raises:
        OSError: the program cannot be started (the caller decides what that means).
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return 124, timed_out_output
    rc = proc.returncode
    assert rc is not None
    return rc, out.decode(errors="replace")
