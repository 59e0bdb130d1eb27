"""The no-GPU path: on a machine without a GPU each command says so in one line, exit 3."""

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from compute_domains.cli import main as cdctl
from compute_domains.cli import validate
from compute_domains.validate import report

pytestmark = pytest.mark.skipif(
    Path("/dev/nvidiactl").exists(), reason="this machine has an NVIDIA GPU"
)
COMMANDS = ["node", "imex-channels", "nccl"]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("output", ["text", "json"])
def test_no_gpu_one_line_nonzero(command: str, output: str) -> None:
    result = CliRunner().invoke(validate.group, [command, "-o", output])
    assert result.exit_code == report.NO_GPU_EXIT
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"validate {command}: no NVIDIA GPU here")


@pytest.mark.parametrize("command", COMMANDS)
def test_registered_under_cdctl(command: str) -> None:
    result = CliRunner().invoke(cdctl.cli, ["validate", command])
    assert result.exit_code == report.NO_GPU_EXIT


def test_process_exit_status() -> None:
    """``cdctl`` runs click with standalone_mode=False; the status must still reach the shell."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from compute_domains.cli.main import main; main()",
            "validate",
            "node",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == report.NO_GPU_EXIT
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1
