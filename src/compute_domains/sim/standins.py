"""Stand-ins for user programs, on the PATH of user images (never of the project's image).

``mnnvl-workload`` stands for a user's multi-node NVLink program: a two-line shell wrapper
around this installation's interpreter, so containers run exactly this code. The IMEX programs
are not here: like the real ones they belong to the node's driver installation
(``sim.driverroot``), and a container gets them only through a CDI spec that mounts them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from compute_domains.infra import atomicfile

_COMMANDS = {
    "mnnvl-workload": "compute_domains.sim.workload",
}


def install(bin_dir: Path, python: str = sys.executable) -> Path:
    """Write the wrappers into ``bin_dir``; returns it."""
    for name, module in _COMMANDS.items():
        script = f'#!/bin/sh\nexec {python} -m {module} "$@"\n'
        atomicfile.write_atomic(bin_dir / name, script, mode=0o755)
    for gone in ("nvidia-imex", "nvidia-imex-ctl"):  # written by earlier versions
        (bin_dir / gone).unlink(missing_ok=True)
    return bin_dir
