"""Fixtures for the mock NVML tests: the library is compiled once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from compute_domains.sim.nvml import build
from tests.unit.sim.nvml import support


@pytest.fixture(scope="session")
def lib_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the freshly built mock ``libnvidia-ml.so.1``."""
    out = tmp_path_factory.mktemp("mocknvml-lib")
    build.build_library(out)
    return out


@pytest.fixture
def probe(lib_dir: Path) -> support.Probe:
    """Run ``_probe.py`` against the mock library built for this session."""

    def run(cfg: Path | None, *args: str) -> support.ProbeResult:
        return support.run_probe(lib_dir, cfg, *args)

    return run
