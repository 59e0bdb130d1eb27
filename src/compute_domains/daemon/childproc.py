"""One child process's plumbing: spawn it, turn its output into log lines, stop it TERM → KILL.

``supervisor`` decides *when* (start, restart after a crash, stop); this module does *how*:

* :func:`spawn` uses ``asyncio.create_subprocess_exec`` with stdin closed and both output pipes
  read by us. With a parent-death signal the kernel sends that signal to the child when we die
  without stopping it (SIGKILL, OOM): no orphaned IMEX keeps its ports. A real container's PID
  namespace does the same; the simulator's containers share one, so this is what guarantees it
  there.
* :func:`pump_until_exit` reads stdout and stderr line by line into the caller's logger (IMEX's
  own ``[ERROR]``/``[WARNING]`` tags map to our levels) until the child exits; the pipes get a
  bounded drain, since a grandchild may have inherited them.
* stopping one is ``containers.procs.terminate``: SIGTERM, a wait bounded by ``grace``, then
  SIGKILL and a wait (shared with the sim's node hosts).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

_LEVEL_TAG = re.compile(r"\[(CRITICAL|ERROR|WARNING|INFO|DEBUG)\]")
_LEVELS = {"CRITICAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARNING": logging.WARNING}
_READ_LIMIT = 1 << 20
_PR_SET_PDEATHSIG = 1

Log = logging.LoggerAdapter[Any]
"""The caller's logger, bound to the child's name."""


def imex_line_level(line: str) -> int:
    """The log level for one child output line, from an IMEX-style ``[LEVEL]`` tag."""
    match = _LEVEL_TAG.search(line)
    return _LEVELS.get(match.group(1), logging.INFO) if match else logging.INFO


async def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: Path | None,
    parent_death_signal: int | None,
) -> asyncio.subprocess.Process:
    """Start ``argv`` with piped output.

    Raises:
        FileNotFoundError: the program is missing (the message says where it should come from).
        OSError: the program could not be started otherwise.
    """
    try:
        return await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            limit=_READ_LIMIT,
            preexec_fn=_preexec(parent_death_signal),
        )
    except FileNotFoundError as err:
        # Our image has no NVIDIA programs: on a node they come from the driver root
        # through the plugin's base CDI spec, so say where to look.
        raise FileNotFoundError(
            err.errno,
            f"{argv[0]} not found in this container: it is mounted from the node's "
            "NVIDIA driver root by the kubelet plugin's base CDI spec; check that the "
            "driver installation there has it and that the chart's nvidiaDriverRoot "
            "points at it (cdctl validate node shows what the spec mounts)",
        ) from err


def _preexec(signum: int | None) -> Callable[[], None] | None:
    if signum is None:
        return None

    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child only makes the call

    def set_parent_death_signal() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)

    return set_parent_death_signal


class _Proc(Protocol):
    """The part of a child (``launcher.Child``) that pumping and stopping use."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def stdout(self) -> asyncio.StreamReader | None: ...
    @property
    def stderr(self) -> asyncio.StreamReader | None: ...
    async def wait(self) -> int: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


async def pump_until_exit(
    proc: _Proc,
    *,
    name: str,
    log: Log,
    drain_timeout: float,
    on_line: Callable[[str], None] | None = None,
) -> int:
    """Log the child's output until it exits (``on_line`` with each line, after logging it);
    its exit status."""
    assert proc.stdout is not None and proc.stderr is not None
    pumps = [
        asyncio.create_task(_pump(proc.stdout, log, on_line), name=f"{name}-stdout"),
        asyncio.create_task(_pump(proc.stderr, log, on_line), name=f"{name}-stderr"),
    ]
    try:
        returncode = await proc.wait()
        # The pipes close with the child, unless a grandchild inherited them.
        _, pending = await asyncio.wait(pumps, timeout=drain_timeout)
        for task in pending:
            task.cancel()
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
    return returncode


async def _pump(
    stream: asyncio.StreamReader, log: Log, on_line: Callable[[str], None] | None
) -> None:
    while True:
        try:
            raw = await stream.readline()
        except ValueError:
            # Longer than the read limit: asyncio has dropped it from the buffer.
            log.warning("child output line longer than %d bytes dropped", _READ_LIMIT)
            continue
        if not raw:
            return
        line = raw.decode(errors="replace").rstrip("\r\n")
        log.log(imex_line_level(line), "%s", line)
        if on_line is not None:
            on_line(line)
