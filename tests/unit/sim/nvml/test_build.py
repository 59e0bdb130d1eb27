"""Building the mock library: reuse of an up-to-date build and clear compile failures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compute_domains.sim import errors
from compute_domains.sim.nvml import build, config

# Each test runs the C compiler on the mock library (about 0.8 s alone).
pytestmark = pytest.mark.slow_unit(8, "runs the C compiler")


def test_build_produces_the_soname_and_is_reused(tmp_path: Path) -> None:
    lib = build.build_library(tmp_path / "out")
    assert lib == tmp_path / "out" / config.LIBRARY_NAME
    data = lib.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert config.LIBRARY_NAME.encode() in data  # the soname
    assert b"nvmlDeviceGetGpuFabricInfoV" in data
    before = lib.stat().st_mtime_ns
    assert build.build_library(tmp_path / "out") == lib
    assert lib.stat().st_mtime_ns == before
    assert sorted(p.name for p in lib.parent.iterdir()) == [
        build.LIBCUDA_NAME,
        config.LIBRARY_NAME,
        config.LIBRARY_NAME + ".sha256",
    ]
    # The libcuda placeholder carries libcuda's own soname (CDI generators derive links from it).
    cuda = (lib.parent / build.LIBCUDA_NAME).read_bytes()
    assert cuda[:4] == b"\x7fELF" and b"libcuda.so.1" in cuda and b"libnvidia-ml" not in cuda


def test_a_changed_stamp_rebuilds(tmp_path: Path) -> None:
    lib = build.build_library(tmp_path)
    lib.write_bytes(b"truncated")
    (tmp_path / (config.LIBRARY_NAME + ".sha256")).write_text("stale")
    build.build_library(tmp_path)
    assert lib.read_bytes()[:4] == b"\x7fELF"


def test_missing_compiler(tmp_path: Path) -> None:
    with pytest.raises(errors.ToolBuildError) as info:
        build.build_library(tmp_path, cc=str(tmp_path / "no-such-cc"))
    assert (info.value.tool, info.value.step) == ("mocknvml", "compile")
    assert "not found" in info.value.detail
    assert not (tmp_path / config.LIBRARY_NAME).exists()


def test_failing_compiler(tmp_path: Path) -> None:
    false = shutil.which("false")
    assert false is not None
    with pytest.raises(errors.ToolBuildError) as info:
        build.build_library(tmp_path, cc=false)
    assert "exited with 1" in info.value.detail
    assert [p.name for p in tmp_path.iterdir()] == []


def test_source_is_package_data() -> None:
    assert b"nvmlInitWithFlags" in build.source_text()
