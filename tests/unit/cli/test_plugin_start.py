"""The plugin's start lines carry what NVIDIA's tooling greps: Verbosity, nodeName, feature gates.

The command is run up to its first contact with the node: NVML is not found here (or, on a GPU
machine, the missing kubeconfig stops it), after the start lines are written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from compute_domains.cli import plugin as cli_plugin


@pytest.mark.usefixtures("root_restored")
def test_start_lines_name_verbosity_node_and_feature_gates(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli_plugin.group,
        ["run", "--host-root", str(tmp_path), "--metrics-port", "0"],
        env={
            "NODE_NAME": "gb200-r0-n01",
            "LOG_VERBOSITY": "0",
            "STRICT_FABRIC": "false",
            "KUBECONFIG": str(tmp_path / "absent"),
            "LD_LIBRARY_PATH": str(tmp_path),
        },
    )
    assert result.exit_code != 0  # stopped after the start lines, as intended
    text = result.output
    assert "Verbosity: 0 (level INFO)" in text, text
    assert "nodeName: gb200-r0-n01" in text, text
    assert '"CrashOnNVLinkFabricErrors":false' in text and '"MPSSupport":false' in text, text
