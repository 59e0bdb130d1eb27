"""Fixtures that give integration tests a real control plane (built tools, a running sim)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from lightkube import AsyncClient

from compute_domains.cli import options
from compute_domains.infra import kube
from compute_domains.sim import lifecycle, state, toolchain


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
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def sim(toolset: toolchain.Toolset, sim_home: Path) -> Iterator[state.SimPaths]:
    """One running sim shared by the session; it dies with the test process if that crashes."""
    paths = state.SimPaths(sim_home, "it")
    started = lifecycle.start(paths, toolset.bin_dir, die_with_parent=True)
    yield paths
    lifecycle.stop(paths, process=started.process)


@pytest.fixture
async def client(sim: state.SimPaths) -> AsyncIterator[AsyncClient]:
    """An admin client of the session's sim."""
    c = kube.client(kube.KubeSettings(kubeconfig=sim.kubeconfig, field_manager="tests"))
    yield c
    await c.close()
