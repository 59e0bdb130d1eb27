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


def _script(module: str, python: str) -> str:
    return f'#!/bin/sh\nexec {python} -m {module} "$@"\n'


def install(bin_dir: Path, python: str = sys.executable) -> Path:
    """Write the wrappers into ``bin_dir``; returns it."""
    for name, module in _COMMANDS.items():
        atomicfile.write_atomic(bin_dir / name, _script(module, python), mode=0o755)
    for gone in ("nvidia-imex", "nvidia-imex-ctl"):  # written by earlier versions
        (bin_dir / gone).unlink(missing_ok=True)
    return bin_dir


def runs_here(path: Path, name: str, python: str = sys.executable) -> bool:
    """True when ``path`` is stand-in ``name`` as ``install`` wrote it for ``python``: the same
    code this process has, so a virtual node may run it as a task (``sim.workload_inproc``)."""
    module = _COMMANDS.get(name)
    try:
        return module is not None and path.read_text() == _script(module, python)
    except OSError:
        return False
