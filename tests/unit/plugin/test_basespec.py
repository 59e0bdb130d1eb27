"""The base CDI spec gives the IMEX daemon the driver's programs, libraries and device nodes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from compute_domains.plugin import basespec, cdi

VERSION = "580.95.05"


def _char(path: Path, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(195, minor))


def _exe(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


def _driver_root(root: Path, *, imex: bool = True, devices: bool = True) -> Path:
    lib = root / "usr/lib64"
    lib.mkdir(parents=True)
    for name in ("libcuda", "libnvidia-ml", "libnvidia-imex"):
        (lib / f"{name}.so.{VERSION}").write_bytes(b"\x7fELF")
        (lib / f"{name}.so.1").symlink_to(f"{name}.so.{VERSION}")
    (lib / "libnvidia-ml.so.570.1").write_bytes(b"\x7fELF")  # another version: not ours
    (lib / "libother.so.1").symlink_to("libnvidia-ml.so.570.1")
    _exe(root / "usr/bin/nvidia-smi")
    if imex:
        _exe(root / "usr/bin/nvidia-imex")
        _exe(root / "usr/sbin/nvidia-imex-ctl")
    (root / "usr/bin/nvidia-debugdump").write_text("not executable")
    fw = root / "lib/firmware/nvidia" / VERSION
    fw.mkdir(parents=True)
    (fw / "gsp_ga10x.bin").write_bytes(b"fw")
    (fw / "README").write_text("not firmware")
    sock = root / "run/nvidia-persistenced"
    sock.mkdir(parents=True)
    (sock / "socket").write_text("")
    if devices:
        _char(root / "dev/nvidia0", 0)
        _char(root / "dev/nvidiactl", 255)
        _char(root / "dev/nvidia-caps/nvidia-cap1", 1)
        _char(root / "dev/nvidia-nvswitch0", 3)  # blocked, as upstream's management mode does
        (root / "dev/nvidia-not-a-device").write_text("")
    return root


def test_discovers_what_a_management_container_needs(tmp_path: Path) -> None:
    files = basespec.discover(_driver_root(tmp_path / "drv"), VERSION, host_dev=tmp_path / "h")
    assert files.binaries == (
        "usr/bin/nvidia-smi",
        "usr/bin/nvidia-imex",
        "usr/sbin/nvidia-imex-ctl",
    )
    assert files.missing_imex() == ()
    assert files.libraries == (
        f"usr/lib64/libcuda.so.{VERSION}",
        f"usr/lib64/libnvidia-imex.so.{VERSION}",
        f"usr/lib64/libnvidia-ml.so.{VERSION}",
        "usr/lib64/libcuda.so.1",
        "usr/lib64/libnvidia-imex.so.1",
        "usr/lib64/libnvidia-ml.so.1",
    )
    assert files.firmware == (f"lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",)
    assert files.sockets == ("run/nvidia-persistenced/socket",)
    assert files.dev_root == "driver"
    assert files.devices == ("dev/nvidia-caps/nvidia-cap1", "dev/nvidia0", "dev/nvidiactl")


def test_a_driver_root_without_imex_says_which_programs_are_missing(tmp_path: Path) -> None:
    files = basespec.discover(_driver_root(tmp_path / "drv", imex=False), VERSION)
    assert files.missing_imex() == ("nvidia-imex", "nvidia-imex-ctl")


def test_libraries_of_another_driver_version_are_not_mounted(tmp_path: Path) -> None:
    files = basespec.discover(_driver_root(tmp_path / "drv"), "999.1.1")
    assert files.libraries == ()
    assert files.firmware == ()


def test_edits_mount_host_paths_at_their_place_under_the_driver_root(tmp_path: Path) -> None:
    files = basespec.discover(_driver_root(tmp_path / "drv"), VERSION)
    edits = basespec.edits(files, Path("/run/nvidia/driver"))
    assert edits.env == ("NVIDIA_VISIBLE_DEVICES=void",)
    mounts = {m.container_path: m for m in edits.mounts}
    imex = mounts["/usr/bin/nvidia-imex"]
    assert imex.host_path == "/run/nvidia/driver/usr/bin/nvidia-imex"
    assert "ro" in imex.options and "bind" in imex.options
    assert mounts["/usr/sbin/nvidia-imex-ctl"].host_path.endswith("/usr/sbin/nvidia-imex-ctl")
    assert f"/usr/lib64/libnvidia-ml.so.{VERSION}" in mounts
    nodes = {n.path: n for n in edits.device_nodes}
    assert nodes["/dev/nvidia0"].host_path == "/run/nvidia/driver/dev/nvidia0"
    # Given by path only: the runtime takes type and numbers from the host's node.
    assert nodes["/dev/nvidia0"].major is None and nodes["/dev/nvidia0"].type is None


def test_device_nodes_come_from_the_host_dev_when_the_driver_root_has_none(
    tmp_path: Path,
) -> None:
    host = tmp_path / "host"
    _char(host / "dev/nvidia1", 1)
    files = basespec.discover(_driver_root(tmp_path / "drv", devices=False), VERSION, host_dev=host)
    assert files.dev_root == "host"
    edits = basespec.edits(files, Path("/run/nvidia/driver"))
    assert [(n.path, n.host_path) for n in edits.device_nodes] == [("/dev/nvidia1", "/dev/nvidia1")]


def test_the_base_spec_is_one_device_all_with_the_edits(tmp_path: Path) -> None:
    files = basespec.discover(_driver_root(tmp_path / "drv"), VERSION)
    spec = cdi.build_base_spec(basespec.edits(files, Path("/")))
    assert spec.kind == cdi.BASE_KIND
    assert [d.name for d in spec.devices] == ["all"]
    paths = {m.container_path for m in spec.devices[0].edits.mounts}
    assert {"/usr/bin/nvidia-imex", "/usr/sbin/nvidia-imex-ctl"} <= paths
    assert all(m.host_path == m.container_path for m in spec.devices[0].edits.mounts)
