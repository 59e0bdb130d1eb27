"""Ending a sim ends every process its containers started (issue 13: leaked nvidia-imex).

Each test runs its own one-node sim with a container whose helper left the container's process
group and ignores SIGTERM (as the ``nvidia-imex`` NVIDIA's daemon starts with a plain exec):
``cdctl sim down`` stops the nodes before the control plane and each container with every
process of its session; a supervisor killed outright leaves them to ``sim down``'s sweep of
the containers recorded on the nodes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import pytest
from lightkube.resources.core_v1 import Pod, ServiceAccount

from compute_domains.containers import procs
from compute_domains.infra import kube
from compute_domains.sim import lifecycle, state, toolchain, topology
from tests.integration.helpers import wait_for
from tests.integration.sim.test_nodes import (
    _plain_pod,
    _processes_with,
    _running_ready,
    _until_count,
    escaping_command,
)


@pytest.mark.parametrize("how", ["down", "supervisor-killed"])
async def test_no_container_process_outlives_the_sim(
    toolset: toolchain.Toolset, sim_home: Path, how: str
) -> None:
    paths = state.SimPaths(sim_home, f"teardown-{how}")
    started = await asyncio.to_thread(
        lifecycle.start,
        paths,
        toolset.bin_dir,
        die_with_parent=True,
        shape=topology.Shape(racks=1, nodes_per_rack=1, control_plane=False),
    )
    marker = f"escaper-{uuid.uuid4().hex[:8]}"
    try:
        admin = kube.client(kube.KubeSettings(kubeconfig=paths.kubeconfig, field_manager="t"))
        try:
            await wait_for(admin, ServiceAccount, "default", lambda _: True, namespace="default")
            await admin.create(_plain_pod("escaper", "default", escaping_command(marker)))
            await wait_for(admin, Pod, "escaper", _running_ready, namespace="default", timeout=60)
        finally:
            await admin.close()
        await _until_count(marker, 1)
        if how == "supervisor-killed":
            recorded = state.read_state(paths)
            assert recorded is not None
            os.kill(recorded.supervisor_pid, signal.SIGKILL)
            await asyncio.to_thread(started.process.wait, 30)  # type: ignore[union-attr]
            assert _processes_with(marker) == 1, "nothing left for the sweep to end"
            assert not procs.pid_alive(recorded.supervisor_pid)
    finally:
        await asyncio.to_thread(lifecycle.stop, paths, process=started.process)
    assert _processes_with(marker) == 0
