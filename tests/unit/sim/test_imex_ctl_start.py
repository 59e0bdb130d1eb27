"""The driver root's ``nvidia-imex-ctl`` starts as cheaply as a probe can, and answers every
command line exactly as the full tool does.

Every IMEX check of every daemon starts one (each agent's every 5 s while its IMEX is READY); the
real tool is a native binary. The wrapper ``driverroot.layout`` writes runs the interpreter
without ``site`` and ``runpy`` and, for a ``-q``, imports none of the full tool's modules (nor
``signal``); anything else goes to the full tool, with ``site`` run first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_domains.sim import driverroot
from compute_domains.sim.nvml import profiles
from tests.unit.sim import imex_service

_FULL = "import sys; from compute_domains.sim import imex; sys.exit(imex.main_ctl(sys.argv[1:]))"
"""The full tool (argparse, then ``imex_ctlbase``/``imex_ctl``), never the ``-q`` fast path."""

_NOT_ON_THE_PROBE_PATH = (
    "site",
    "runpy",
    "signal",
    "argparse",
    "asyncio",
    "typing",
    "dataclasses",
    "pathlib",
    "socket",
    "selectors",
    "compute_domains.sim.imex_wire",
    "compute_domains.sim.imex",
    "compute_domains.sim.imex_ctlbase",
)


@pytest.fixture
def ctl(tmp_path: Path) -> Path:
    """The ``nvidia-imex-ctl`` of a node's driver root, as the simulator writes it."""
    out = driverroot.layout(tmp_path / "node", profiles.gb200(2, 3), None)
    return out.driver_root / driverroot.BIN_DIR / "nvidia-imex-ctl"


@pytest.fixture
def port() -> Iterator[int]:
    """A command service on 127.0.0.1 that answers every request with a READY status row."""
    row = {"t": "status", "state": "READY", "node": 0, "connections": {"0": "CONNECTED"}}
    with imex_service.answering(row) as served:
        yield served


def _configs(tmp_path: Path, port: int) -> dict[str, str]:
    nodes = tmp_path / "nodes.cfg"
    nodes.write_text("10.0.0.1\n")
    made = {
        "CFG": f"IMEX_CMD_PORT={port}\nIMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\n",
        "REFUSED": "IMEX_CMD_PORT=1\nIMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\n",
        "OFF": "IMEX_CMD_ENABLED=0\n",
    }
    paths = {"PORT": str(port), "MISSING": str(tmp_path / "none.cfg")}
    for name, body in made.items():
        path = tmp_path / f"{name.lower()}.cfg"
        path.write_text(f"IMEX_NODE_CONFIG_FILE={nodes}\n{body}")
        paths[name] = str(path)
    lost = tmp_path / "nonodes.cfg"
    lost.write_text(f"IMEX_NODE_CONFIG_FILE={tmp_path / 'gone.cfg'}\nIMEX_CMD_PORT={port}\n")
    paths["NONODES"] = str(lost)
    return paths


def _run(argv: list[str]) -> tuple[int, str, str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "line",
    [
        # the drivers' checks: the fast path
        "-c CFG -q",
        "-q -c CFG -t 2000",
        "-t 2000 -q -c CFG",
        "-c REFUSED -q",
        "-c OFF -q",
        "-c MISSING -q",
        "-c NONODES -q",
        # anything else: the full tool
        "-q -i 127.0.0.1 PORT",
        "-q -i 127.0.0.1 notaport",
        "-N -c NONODES",
        "-q -q",
        "-q -t soon",
        "-qc CFG",
        "-x",
        "",
        "--help",
    ],
)
def test_every_command_line_reads_as_the_full_tools(
    ctl: Path, tmp_path: Path, port: int, line: str
) -> None:
    paths = _configs(tmp_path, port)
    argv = [paths.get(word, word) for word in line.split()]
    wrapper = _run([str(ctl), *argv])
    full = _run([sys.executable, "-c", _FULL, *argv])
    assert wrapper == full
    if line == "-c CFG -q":
        assert wrapper == (0, "READY\n", "")


def test_a_check_starts_without_site_runpy_or_the_full_tool(
    ctl: Path, tmp_path: Path, port: int
) -> None:
    """What a ``-q`` imports, as ``-X importtime`` lists it (the variable reaches the
    interpreter through the wrapper)."""
    cfg = _configs(tmp_path, port)["CFG"]
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    done = subprocess.run(
        [str(ctl), "-c", cfg, "-q"], capture_output=True, text=True, env=env, timeout=60
    )
    assert (done.returncode, done.stdout) == (0, "READY\n")
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "compute_domains.sim.imex_query" in imported  # the listing is complete
    assert sorted(imported.intersection(_NOT_ON_THE_PROBE_PATH)) == []
