"""Child processes of the simulator and its containers: logged to a file, never orphaned.

Every child gets ``PR_SET_PDEATHSIG=SIGKILL``, so when the process that started it dies for any
reason (even SIGKILL) the kernel kills the child too: no orphan etcd or kube-apiserver keeps a
port busy after a crashed test run. Stopping is SIGTERM, a bounded wait, then SIGKILL
(``terminate``, for any child: the daemon's IMEX, the sim's node hosts).
A container's child leads a session of its own: when it ends, every process of that session
ends too (``kill_session``), whatever process group its processes moved to, as every process of
a container's PID namespace dies with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

logger = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: ask the kernel to SIGKILL this child when its parent exits."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclasses.dataclass(slots=True)
class Child:
    """One running child process with its log file."""

    name: str
    proc: asyncio.subprocess.Process
    log_path: Path
    group: bool = False
    """The child leads a process group of its own (a container): a kill, and its own end,
    end the whole group."""

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.proc.pid

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the child's log (for error messages)."""
        return log_tail(self.log_path, lines)

    async def stop(self, grace: float = 10.0) -> int:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; returns the exit code."""
        if self.proc.returncode is None:
            self._signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    await self.proc.wait()
            except TimeoutError:
                logger.warning(
                    "%s (pid %d) ignored SIGTERM for %.0fs; killing it", self.name, self.pid, grace
                )
                self._signal(signal.SIGKILL)
                await self.proc.wait()
        self.end_group()
        rc = self.proc.returncode
        assert rc is not None
        return rc

    def kill(self) -> None:
        """SIGKILL the child and (a container) every process of its session, without waiting:
        for cancellation paths, which must not leave a process behind."""
        self._signal(signal.SIGKILL)
        self.end_group()

    def end_group(self) -> None:
        """SIGKILL what is left of the child's session once it has ended: like the processes of
        a container's PID namespace when its first process exits, none outlives the container,
        also not one that moved to a process group of its own (a daemon's helper, a shell job)."""
        if self.group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            kill_session(self.pid)

    def _signal(self, sig: signal.Signals) -> None:
        # Like a container runtime: SIGTERM goes to the first process only (it stops its own
        # children, e.g. the daemon its nvidia-imex); SIGKILL ends the whole container.
        if self.group and sig == signal.SIGKILL:
            try:
                os.killpg(self.pid, sig)
                return
            except (ProcessLookupError, PermissionError):
                pass  # not yet its group's leader (just started): the process itself
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)


async def start(
    name: str,
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    preexec: bool = True,
    group: bool = False,
    pass_fds: Sequence[int] = (),
) -> Child:
    """Start ``argv`` with stdout and stderr appended to ``log_path``.

    ``preexec=False`` skips the parent-death hook in the forked child; the program must then
    set it itself (``container_init`` does). A process that uses gRPC must start children that
    way: Python code run between fork and exec triggers gRPC's fork handlers, which break the
    child. ``group=True`` when the program makes itself a process group leader (containers
    do): stopping it then signals the whole group. ``pass_fds`` stay open in the child.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            preexec_fn=die_with_parent if preexec else None,
            pass_fds=tuple(pass_fds),
        )
    logger.debug("started %s pid=%d: %s", name, proc.pid, " ".join(argv))
    return Child(name=name, proc=proc, log_path=log_path, group=group)


def _stat(pid: int | str) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); [] when gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    # The command name is in parentheses and may itself hold spaces and parentheses.
    return raw.rsplit(")", 1)[-1].split()


def start_time(pid: int) -> int | None:
    """When a process started (clock ticks after boot): tells a pid's reuse apart; None when
    it is gone."""
    fields = _stat(pid)
    return int(fields[19]) if len(fields) > 19 else None


def session_members(sid: int) -> list[int]:
    """Live processes (no zombies) whose session id is ``sid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if len(fields) > 3 and fields[3] == str(sid) and fields[0] != "Z":
                members.append(int(entry.name))
    return members


def kill_session(sid: int) -> int:
    """SIGKILL every process of session ``sid`` until none is left; returns how many.

    Scanned again after each round: a member may fork while the previous round is killed. The
    session id stays allocated while any member lives, so no unrelated process can take it.
    A killed process may still look alive in the next scan (on a busy machine it has not run to
    its end yet), so processes are counted once each, not once per signal.
    """
    killed: set[int] = set()
    for _ in range(50):
        members = [pid for pid in session_members(sid) if pid != os.getpid()]
        if not members:
            break
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
    return len(killed)


def pid_alive(pid: int) -> bool:
    """True when a process with this id exists (and is not a zombie of ours)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def stopped(pid: int) -> bool:
    """True when the process is stopped by a signal (SIGSTOP: a paused control-plane drill)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] in ("T", "t")


def pid_cmdline(pid: int) -> list[str]:
    """The command line of a process, empty when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a container's log file ("" when it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class _Stoppable(Protocol):
    """A running child process as ``terminate`` stops it (an asyncio process, a launcher's
    child)."""

    @property
    def pid(self) -> int: ...
    @property
    def returncode(self) -> int | None: ...
    async def wait(self) -> int: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


async def terminate(
    proc: _Stoppable, *, grace: float, log: logging.Logger | logging.LoggerAdapter[Any]
) -> int | None:
    """Stop ``proc`` if it runs (SIGTERM, ``grace`` seconds, SIGKILL); its exit status."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            async with asyncio.timeout(grace):
                await proc.wait()
        except TimeoutError:
            log.warning("pid %d ignored SIGTERM for %.1fs; sending SIGKILL", proc.pid, grace)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        log.info("stopped pid %d (status %s)", proc.pid, proc.returncode)
    return proc.returncode
