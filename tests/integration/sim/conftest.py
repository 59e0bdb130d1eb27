"""A sim with simulated GB200 nodes (one rack of two) shared by this folder's tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace, ServiceAccount

from compute_domains.infra import kube
from compute_domains.sim import control, lifecycle, state, toolchain, topology
from tests.conftest import keep_sims
from tests.integration.helpers import wait_for


@pytest.fixture(scope="module")
def nodes_sim(toolset: toolchain.Toolset, sim_home: Path) -> Iterator[state.SimPaths]:
    paths = state.SimPaths(sim_home, "nodes")
    started = lifecycle.start(
        paths,
        toolset.bin_dir,
        die_with_parent=True,
        shape=topology.Shape(racks=1, nodes_per_rack=2, gpus_per_node=4),
    )
    yield paths
    lifecycle.stop(paths, process=started.process, remove=not keep_sims())


@pytest.fixture
async def admin(nodes_sim: state.SimPaths) -> AsyncIterator[AsyncClient]:
    c = kube.client(kube.KubeSettings(kubeconfig=nodes_sim.kubeconfig, field_manager="tests"))
    yield c
    await c.close()


@pytest.fixture
async def ns(admin: AsyncClient) -> AsyncIterator[str]:
    """A fresh namespace (with its default ServiceAccount) on the module's sim."""
    name = f"t-{uuid.uuid4().hex[:6]}"
    await admin.create(Namespace.from_dict({"metadata": {"name": name}}))
    await wait_for(admin, ServiceAccount, "default", lambda _: True, namespace=name)
    yield name
    await admin.delete(Namespace, name)


def node_op(sim: state.SimPaths, op: str, node: str) -> Any:
    """One request to the sim's control socket; its answer."""
    return control.request(sim.root / "control.sock", {"op": op, "node": node})
