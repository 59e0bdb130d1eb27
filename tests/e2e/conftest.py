"""The full system on simulated nodes: the chart-installed driver on a GB200 rack shape.

The driver is installed from the chart archive ``make chart`` writes (packaged from this
checkout once per session), as a user who pins a version installs it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from lightkube import AsyncClient

from compute_domains.cli import options
from compute_domains.infra import kube
from compute_domains.sim import chart_archive, driver, lifecycle, state, toolchain, topology
from tests.conftest import keep_sims

DRIVER_NS = "compute-domains"


def suite_values() -> tuple[str, ...]:
    """Chart values every install of this suite adds: ``CD_E2E_SET``, comma-separated
    ``key=value`` (e.g. ``imex.agents=resident,imex.scope=perClique``), to run the whole
    acceptance suite on another shape of the driver (issue 26 point 4). A test's own values
    come after these, so they win."""
    return tuple(v.strip() for v in os.environ.get("CD_E2E_SET", "").split(",") if v.strip())


@pytest.fixture(scope="session")
def packaged_chart(toolset: toolchain.Toolset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's chart as ``make chart`` packages it: ``compute-domains-<version>.tgz``."""
    settings = chart_archive.ChartSettings(
        chart=options.chart_dir(), out=tmp_path_factory.mktemp("chart")
    )
    return chart_archive.package(settings, toolset.path("helm")).path


@pytest.fixture(scope="module")
def rack_sim(
    toolset: toolchain.Toolset, packaged_chart: Path, sim_home: Path, request: pytest.FixtureRequest
) -> Iterator[state.SimPaths]:
    """A sim with the driver installed; shape from the module's ``SHAPE`` (default 1 x 18),
    node mode from its ``NODES_MODE`` (default ``process``), upstream's node-lifecycle timings
    (40 s node grace) when its ``PATIENCE`` is true, DRANET's stand-in (the guide's ``dra.net``
    RDMA NICs, ``sim.dranet``) when its ``DRANET`` is true."""
    shape = getattr(request.module, "SHAPE", topology.Shape(racks=1, nodes_per_rack=18))
    paths = state.SimPaths(sim_home, request.module.__name__.rsplit(".", 1)[-1][:20])
    started = lifecycle.start(
        paths,
        toolset.bin_dir,
        die_with_parent=True,
        shape=shape,
        chart=packaged_chart,
        nodes_mode=getattr(request.module, "NODES_MODE", "process"),
        patience=getattr(request.module, "PATIENCE", False),
        dranet=getattr(request.module, "DRANET", False),
    )
    try:
        if suite_values():
            settings = driver.DriverSettings(chart=packaged_chart, values=suite_values())
            helm = Path(state.read_state(paths).bin_dir) / "helm"  # type: ignore[union-attr]
            asyncio.run(driver.install(settings, helm, paths.kubeconfig))
        yield paths
    finally:
        lifecycle.stop(paths, process=started.process, remove=not keep_sims())


@pytest.fixture
async def admin(rack_sim: state.SimPaths) -> AsyncIterator[AsyncClient]:
    c = kube.client(kube.KubeSettings(kubeconfig=rack_sim.kubeconfig, field_manager="tests"))
    yield c
    await c.close()
