"""The daemon's readiness probe (``cdctl daemon check``), kept free of heavy imports.

The kubelet runs it as an exec probe every second on every node of a domain, so it imports
only the standard library: it asks the local IMEX service ``nvidia-imex-ctl -c <cfg> -q`` and
passes only on exactly ``READY``; a node without a clique ID has no IMEX service and passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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


async def check(settings: CheckSettings) -> CheckResult:
    """Run the probe once; never raises for a failing or missing ctl tool."""
    if not settings.clique_id:
        return CheckResult(True, "check succeeded (noop, clique ID is empty)")
    argv = [settings.ctl_command, "-c", str(settings.config_path), "-q"]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as err:
        return CheckResult(False, f"IMEX daemon not ready: cannot run {argv[0]}: {err}")
    try:
        async with asyncio.timeout(settings.timeout):
            out, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return CheckResult(False, f"IMEX daemon not ready: {argv[0]} gave no answer in time")
    text = out.decode(errors="replace")
    if proc.returncode == 0 and text == READY_OUTPUT:
        return CheckResult(True, "check succeeded")
    return CheckResult(
        False, f"IMEX daemon not ready (exit status {proc.returncode}): {text.strip()!r}"
    )


