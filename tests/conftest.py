"""Shared fixtures: the built upstream tools and a short sim home (strictness is in pyproject)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_domains.cli import options
from compute_domains.sim import toolchain


@pytest.fixture(scope="session")
def toolset() -> toolchain.Toolset:
    """The built upstream tools (`make test` builds them first; this only finds them)."""
    built, _ = asyncio.run(toolchain.ensure_built(options.toolchain_settings()))
    return built


@pytest.fixture(scope="session")
def sim_home() -> Iterator[Path]:
    # Short path under /tmp: unix socket paths of simulated nodes must stay under 108 bytes.
    home = Path(tempfile.mkdtemp(prefix="cdsim-", dir="/tmp"))
    yield home
    if not keep_sims():
        shutil.rmtree(home, ignore_errors=True)


def keep_sims() -> bool:
    """CD_KEEP_SIM=1 keeps every sim's folder (each component's log) to debug a failure."""
    return bool(os.environ.get("CD_KEEP_SIM"))
