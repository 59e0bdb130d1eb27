"""Fixtures that give integration tests a real control plane (built tools, a running sim)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from lightkube import AsyncClient

from compute_domains.infra import kube
from compute_domains.sim import lifecycle, state, toolchain
from tests.conftest import keep_sims


@pytest.fixture(scope="session")
def sim(toolset: toolchain.Toolset, sim_home: Path) -> Iterator[state.SimPaths]:
    """One running sim shared by the session; it dies with the test process if that crashes."""
    paths = state.SimPaths(sim_home, "it")
    started = lifecycle.start(paths, toolset.bin_dir, die_with_parent=True)
    yield paths
    lifecycle.stop(paths, process=started.process, remove=not keep_sims())


@pytest.fixture
async def client(sim: state.SimPaths) -> AsyncIterator[AsyncClient]:
    """An admin client of the session's sim."""
    c = kube.client(kube.KubeSettings(kubeconfig=sim.kubeconfig, field_manager="tests"))
    yield c
    await c.close()
