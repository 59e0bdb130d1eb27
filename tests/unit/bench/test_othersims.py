"""Sims running beside a benchmark are named (a sim left by ``--keep`` once spoiled five runs)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_domains.bench import othersims
from compute_domains.sim import state


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process whose command line looks like a sim supervisor of ``tmp_path``'s home."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "serve", "--home", str(tmp_path)]
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _record(home: Path, name: str, pid: int) -> None:
    paths = state.SimPaths(home, name)
    state.write_state(
        paths,
        state.SimState(
            name=name,
            phase="ready",
            supervisor_pid=pid,
            bin_dir="/bin",
            created=time.time(),
        ),
    )


def test_only_other_running_sims_are_named(
    tmp_path: Path, supervisor: subprocess.Popen[bytes]
) -> None:
    _record(tmp_path, "prof", supervisor.pid)  # left behind by --keep, still running
    _record(tmp_path, "bench", supervisor.pid)  # the benchmark's own
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _record(tmp_path, "old", gone.pid)  # its supervisor ended
    assert othersims.others(tmp_path, own="bench") == ["prof"]
    line = othersims.warning(["prof"], tmp_path)
    assert "prof" in line and "cdctl sim down --name prof" in line and str(tmp_path) in line


def test_no_sim_home_names_none(tmp_path: Path) -> None:
    assert othersims.others(tmp_path / "absent", own="bench") == []
