"""Stand-in executables the simulated nodes put on every container's PATH.

``nvidia-imex`` and ``nvidia-imex-ctl`` run the simulated IMEX service (``sim.imex``);
``mnnvl-workload`` stands for a user's multi-node NVLink program. Each is a two-line shell
wrapper around this installation's interpreter, so containers run exactly this code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from compute_domains.infra import atomicfile

_COMMANDS = {
    "nvidia-imex": "compute_domains.sim.imex_main imex",
    "nvidia-imex-ctl": "compute_domains.sim.imex_main ctl",
    "mnnvl-workload": "compute_domains.sim.workload",
}


def install(bin_dir: Path, python: str = sys.executable) -> Path:
    """Write the wrappers into ``bin_dir``; returns it."""
    for name, module in _COMMANDS.items():
        # A SIGUSR1/SIGHUP that lands while the interpreter starts must not kill the daemon:
        # ignored before exec, they stay ignored until the stand-in installs its handlers.
        trap = "trap '' USR1 HUP\n" if name == "nvidia-imex" else ""
        script = f'#!/bin/sh\n{trap}exec {python} -m {module} "$@"\n'
        atomicfile.write_atomic(bin_dir / name, script, mode=0o755)
    return bin_dir
