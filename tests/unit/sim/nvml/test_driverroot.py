"""A simulated node's driver root looks like a GB200 host's to any driver's plugin."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from compute_domains.plugin import basespec
from compute_domains.sim import driverroot
from compute_domains.sim.nvml import config, profiles


def _layout(lib_dir: Path, node: Path) -> driverroot.Layout:
    return driverroot.layout(node, profiles.gb200(2, 3), lib_dir / config.LIBRARY_NAME)


def test_the_driver_root_holds_what_the_base_spec_mounts(lib_dir: Path, tmp_path: Path) -> None:
    out = _layout(lib_dir, tmp_path / "node")
    assert out.driver_root == tmp_path / "node/run/nvidia/driver"
    files = basespec.discover(out.driver_root, profiles.DEFAULT_DRIVER_VERSION)
    assert files.missing_imex() == ()
    assert {"usr/bin/nvidia-imex", "usr/bin/nvidia-imex-ctl", "usr/bin/nvidia-smi"} <= set(
        files.binaries
    )
    version = profiles.DEFAULT_DRIVER_VERSION
    assert f"usr/lib64/libnvidia-ml.so.{version}" in files.libraries
    assert "usr/lib64/libnvidia-ml.so.1" in files.libraries
    assert files.firmware  # GSP firmware of this driver version
    # Device nodes with a GB200 host's numbers, in the driver root and the node's /dev.
    assert files.dev_root == "driver"
    assert "dev/nvidia3" in files.devices and "dev/nvidia-caps/nvidia-cap1" in files.devices
    for base in (out.driver_root, tmp_path / "node"):
        st = (base / "dev/nvidia3").stat()
        assert stat.S_ISCHR(st.st_mode)
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (driverroot.NVIDIA_MAJOR, 3)
    proc = tmp_path / "node/proc"
    assert "nvidia-caps-imex-channels" in (proc / "devices").read_text()
    assert (proc / "driver/nvidia/capabilities/fabric-imex-mgmt").is_file()
    assert version in (proc / "driver/nvidia/version").read_text()


def test_nvidia_smi_answers_from_the_nodes_nvml_without_any_setting(
    lib_dir: Path, tmp_path: Path
) -> None:
    out = _layout(lib_dir, tmp_path / "node")
    env = {k: v for k, v in os.environ.items() if k not in ("MOCK_NVML_CONFIG", "LD_LIBRARY_PATH")}
    res = subprocess.run(
        [str(out.driver_root / "usr/bin/nvidia-smi"), "-L"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 4 and lines[0].startswith("GPU 0: ")


def test_the_imex_stand_ins_run_from_the_driver_root(lib_dir: Path, tmp_path: Path) -> None:
    out = _layout(lib_dir, tmp_path / "node")
    res = subprocess.run(
        [str(out.driver_root / "usr/bin/nvidia-imex-ctl"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert sys.executable in (out.driver_root / "usr/bin/nvidia-imex").read_text()


def test_a_second_layout_keeps_the_device_nodes_and_refreshes_files(
    lib_dir: Path, tmp_path: Path
) -> None:
    node = tmp_path / "node"
    first = _layout(lib_dir, node)
    inode = (first.driver_root / "dev/nvidia0").stat().st_ino
    second = _layout(lib_dir, node)
    assert (second.driver_root / "dev/nvidia0").stat().st_ino == inode
    assert second.device_nodes == first.device_nodes
