"""How the daemon runs its programs (``nvidia-imex`` and its ctl check): the ``Launcher`` seam.

The daemon's code path is the same wherever it runs; only the launcher object differs:

* :class:`ProcessLauncher` (the default, what a real node runs): ``nvidia-imex`` is a child
  process (``childproc.spawn``) and a ctl check is a short-lived process;
* an in-process launcher (the simulator's virtual-node mode, built by the CLI from the
  simulator's IMEX stand-in) answers the same calls with the same classes run as asyncio tasks.

A launched child is anything with the subset of ``asyncio.subprocess.Process`` that the
supervisor uses (:class:`Child`): its pid, exit status, output streams, ``wait`` and signals.
A launcher's ``run`` is one short program to completion: (exit status, stdout and stderr
merged), 124 when it outlived ``timeout`` (then it is killed), 127 when it cannot be started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from compute_domains.daemon import childproc
from compute_domains.infra import subproc


class Child(Protocol):
    """A started child program, as the supervisor sees it."""

    @property
    def pid(self) -> int:
        """Its process id (an in-process child has a stand-in number)."""

    @property
    def returncode(self) -> int | None:
        """Its exit status once it ended; None while it runs."""

    @property
    def stdout(self) -> asyncio.StreamReader | None:
        """Its standard output."""

    @property
    def stderr(self) -> asyncio.StreamReader | None:
        """Its standard error."""

    async def wait(self) -> int:
        """Wait for its end; its exit status."""

    def send_signal(self, signal: int) -> None:
        """Deliver ``signal`` (SIGUSR1 reloads IMEX)."""

    def terminate(self) -> None:
        """SIGTERM."""

    def kill(self) -> None:
        """SIGKILL."""


class Launcher(Protocol):
    """Starts the daemon's programs."""

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None,
        cwd: Path | None,
        parent_death_signal: int | None,
    ) -> Child:
        """Start a long-lived child with piped output.

        Raises:
            OSError: it cannot be started (FileNotFoundError for a missing program).
        """

    async def run(self, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        """Run a short program to its end: (exit status, merged output); 124 on timeout."""


class ProcessLauncher:
    """Programs as child processes (a real node, and the simulator's process mode)."""

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None,
        cwd: Path | None,
        parent_death_signal: int | None,
    ) -> Child:
        """``childproc.spawn``."""
        return await childproc.spawn(
            argv, env=env, cwd=cwd, parent_death_signal=parent_death_signal
        )

    async def run(self, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        """A child process with merged output, killed after ``timeout``."""
        try:
            return await subproc.run_merged(argv, timeout)
        except OSError as err:
            return 127, f"cannot run {argv[0]}: {err}"
