"""The daemon's IMEX check: ``nvidia-imex-ctl -q`` says ``READY``; kept free of heavy imports.

One check asks the local IMEX service ``nvidia-imex-ctl -c <cfg> -q`` once and passes only when
the combined output is exactly ``READY\\n``; a node without a clique ID has no IMEX service and
passes. A ctl that hangs (a wedged daemon) fails after ``timeout`` and is killed. It never looks
at the rest of the domain: a workload is released as soon as its local daemon is up.

The running daemon runs it itself (:func:`check`, paced by ``health``), and the kubelet's probes
ask the daemon for the result over HTTP. ``cdctl daemon check`` runs it once by hand (and for
anyone who probes the container by exec, as NVIDIA's chart does); ``compute_domains.cli.entry``
runs that command before importing anything else, so this module imports only the light parts of
the standard library (no asyncio, no click, no Kubernetes client).
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

READY_OUTPUT = "READY\n"
"""The only ctl output that counts as ready."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CheckSettings:
    """What ``cdctl daemon check`` needs."""

    clique_id: str = ""
    """Empty: the node has no IMEX daemon, so the check passes at once."""
    config_path: Path = Path("/imexd/imexd.cfg")
    """IMEX config the ctl tool reads the command endpoint from."""
    ctl_command: str = "nvidia-imex-ctl"
    """The IMEX control tool (found on PATH)."""
    timeout: float = 8.0
    """Seconds before a hanging ctl query counts as not ready (under the probe's 10 s)."""


@dataclasses.dataclass(frozen=True, slots=True)
class CheckResult:
    """Outcome of one probe run."""

    ok: bool
    message: str


Runner = Callable[[Sequence[str], float], Awaitable[tuple[int, str]]]
"""Runs a program to its end: (exit status, merged output), 124 on timeout, 127 when it cannot
start (``daemon.launcher.Launcher.run``)."""

_NOOP = "check succeeded (noop, clique ID is empty)"


def _argv(settings: CheckSettings) -> list[str]:
    return [settings.ctl_command, "-c", str(settings.config_path), "-q"]


def verdict(argv: Sequence[str], returncode: int, text: str) -> CheckResult:
    """What one ctl answer means (exit status, merged output)."""
    if returncode == 124:
        return CheckResult(False, f"IMEX daemon not ready: {argv[0]} gave no answer in time")
    if returncode == 0 and text == READY_OUTPUT:
        return CheckResult(True, "check succeeded")
    return CheckResult(False, f"IMEX daemon not ready (exit status {returncode}): {text.strip()!r}")


def run(settings: CheckSettings) -> CheckResult:
    """Run the probe once, synchronously; never raises for a failing or missing ctl tool."""
    if not settings.clique_id:
        return CheckResult(True, _NOOP)
    argv = _argv(settings)
    try:
        proc = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=settings.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return CheckResult(False, f"IMEX daemon not ready: {argv[0]} gave no answer in time")
    except OSError as err:
        return CheckResult(False, f"IMEX daemon not ready: cannot run {argv[0]}: {err}")
    return verdict(argv, proc.returncode, proc.stdout.decode(errors="replace"))


async def check(settings: CheckSettings, runner: Runner | None = None) -> CheckResult:
    """:func:`run` for async callers (in a worker thread, so the loop keeps serving); with a
    ``runner`` (an in-process launcher's), the ctl query goes through it instead."""
    if runner is None:
        import asyncio  # only async callers pay for it; the probe process never imports asyncio

        return await asyncio.to_thread(run, settings)
    if not settings.clique_id:
        return CheckResult(True, _NOOP)
    argv = _argv(settings)
    returncode, text = await runner(argv, settings.timeout)
    return verdict(argv, returncode, text)
