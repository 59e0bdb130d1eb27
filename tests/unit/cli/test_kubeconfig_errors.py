"""A command that cannot load its Kubernetes configuration says so in one line, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from compute_domains.infra import errors, kube


def test_a_missing_kubeconfig_is_a_project_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    with pytest.raises(errors.ConfigError, match=f"from {missing}: .*not found"):
        kube.load_config(kube.KubeSettings(kubeconfig=missing))


def test_no_service_account_outside_a_pod_is_a_project_config_error(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="from the pod's ServiceAccount"):
        kube.load_config(kube.KubeSettings(service_account_dir=tmp_path / "sa"))


def test_cdctl_status_without_a_kubeconfig_prints_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    done = subprocess.run(
        [sys.executable, "-m", "compute_domains", "status", "--kubeconfig", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"error: cannot load the Kubernetes configuration from {missing}: "
        f"Configuration file {missing} not found"
    ]
