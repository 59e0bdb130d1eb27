"""Run the mock NVML probe (``_probe.py``) in a fresh interpreter and read back its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compute_domains.sim.nvml import config

PROBE = Path(__file__).with_name("_probe.py")


@dataclass(frozen=True)
class ProbeResult:
    """What one probe process printed and returned."""

    returncode: int
    data: dict[str, Any]
    stderr: str


Probe = Callable[..., ProbeResult]
"""``probe(config_path_or_None, scenario, *args)``."""


def run_probe(lib: Path, cfg: Path | None, *args: str, timeout: float = 60.0) -> ProbeResult:
    """Run ``_probe.py`` with a minimal environment: only our library folder and the config.

    A fresh process per run is needed because nvidia-ml-py caches the library it loaded.
    """
    env = {"LD_LIBRARY_PATH": str(lib), "PYTHONDONTWRITEBYTECODE": "1"}
    if cfg is not None:
        env[config.CONFIG_ENV] = str(cfg)
    proc = subprocess.run(
        [sys.executable, str(PROBE), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    data = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout else {}
    return ProbeResult(proc.returncode, data, proc.stderr)
