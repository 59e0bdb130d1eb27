"""Virtual nodes in node host processes (``sim.hosts``): one process per rack here.

A sim of 2 racks x 2 virtual nodes with ``racks_per_host=1``: each rack's nodes run in a
``cdctl sim node-host`` process of their own, the control-plane node with the first rack. The
tests check what a user of the sim sees does not depend on it: every node registers and runs
pods, ``kubectl logs`` reaches a node of either host, node faults through the sim's control
socket act on the host that runs the node, and a host that dies fails the sim with its reason.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.cli import sim as sim_cli
from compute_domains.cli import views
from compute_domains.containers import procs
from compute_domains.infra import kube
from compute_domains.sim import errors, lifecycle, state, toolchain, topology
from tests.conftest import keep_sims
from tests.integration.helpers import wait_for
from tests.integration.sim.conftest import node_op

SHAPE = topology.Shape(racks=2, nodes_per_rack=2, gpus_per_node=4)
RACK0 = {"gb200-r0-n00", "gb200-r0-n01", topology.CONTROL_PLANE_NODE}
RACK1 = {"gb200-r1-n00", "gb200-r1-n01"}


@pytest.fixture(scope="module")
def hosts_sim(toolset: toolchain.Toolset, sim_home: Path) -> Iterator[state.SimPaths]:
    paths = state.SimPaths(sim_home, "hosts")
    started = lifecycle.start(
        paths,
        toolset.bin_dir,
        die_with_parent=True,
        shape=SHAPE,
        nodes_mode="virtual",
        racks_per_host=1,
    )
    yield paths
    lifecycle.stop(paths, process=started.process, remove=not keep_sims())


@pytest.fixture
async def admin(hosts_sim: state.SimPaths) -> AsyncIterator[AsyncClient]:
    c = kube.client(kube.KubeSettings(kubeconfig=hosts_sim.kubeconfig, field_manager="tests"))
    yield c
    await c.close()


def _host_pids(sim: state.SimPaths) -> list[int]:
    recorded = state.read_state(sim)
    assert recorded is not None
    children = Path(f"/proc/{recorded.supervisor_pid}/task/{recorded.supervisor_pid}/children")
    return [
        int(p)
        for p in children.read_text().split()
        if "sim node-host" in " ".join(procs.pid_cmdline(int(p)))
    ]


def _ready(n: Node) -> bool:
    return any(
        c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []) if n.status
    )


async def test_each_rack_runs_in_a_host_of_its_own(
    admin: AsyncClient, hosts_sim: state.SimPaths
) -> None:
    assert len(_host_pids(hosts_sim)) == 2
    status = CliRunner().invoke(
        sim_cli.group,
        ["status", "--name", hosts_sim.name, "-o", "json"],
        env={"CD_SIM_HOME": str(hosts_sim.home)},
    )
    assert status.exit_code == 0, status.output
    components = json.loads(status.output)["components"]
    assert components["node-host-0"] and components["node-host-1"], components
    plans = [json.loads((hosts_sim.root / f"hosts/{k}.json").read_text()) for k in (0, 1)]
    assert [set(p["nodes"]) for p in plans] == [RACK0, RACK1]
    table = await asyncio.to_thread(node_op, hosts_sim, "nodes", "")
    assert set(table) == RACK0 | RACK1
    assert all(v["running"] for v in table.values()), table
    for name in RACK0 | RACK1:
        await wait_for(admin, Node, name, _ready, timeout=60)


async def test_topology_lists_every_node_of_every_host(hosts_sim: state.SimPaths) -> None:
    """``cdctl topology`` reads Nodes undecoded (``kube.list_raw``): both racks, all ready."""
    result = await asyncio.to_thread(
        CliRunner().invoke,
        views.topology,
        ["--kubeconfig", str(hosts_sim.kubeconfig), "-o", "json"],
    )
    assert result.exit_code == 0, result.output
    domains = json.loads(result.output)["domains"]
    gpu_nodes = (RACK0 | RACK1) - {topology.CONTROL_PLANE_NODE}
    assert sorted(n["name"] for d in domains for n in d["nodes"]) == sorted(gpu_nodes)
    assert len(domains) == 2 and all(d["clique"] and d["free"] == 2 for d in domains), domains


async def test_a_pod_on_either_host_runs_and_its_log_is_served(admin: AsyncClient, ns: str) -> None:
    for node in ("gb200-r0-n01", "gb200-r1-n01"):
        name = f"hello-{node[-5:-4]}"
        await admin.create(
            Pod.from_dict(
                {
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [
                            {
                                "name": "c",
                                "image": "debian:12",
                                "command": ["sh", "-c", f"echo hello from {node}; sleep 3600"],
                            }
                        ],
                    },
                }
            )
        )
        await wait_for(
            admin, Pod, name, lambda p: bool(p.status and p.status.phase == "Running"), namespace=ns
        )

        async def says_hello(pod: str = name, node: str = node) -> None:
            async for line in admin.log(pod, namespace=ns, follow=True):
                if f"hello from {node}" in line:
                    return

        await asyncio.wait_for(says_hello(), 30)


async def test_a_node_fault_acts_on_the_host_that_runs_the_node(
    admin: AsyncClient, hosts_sim: state.SimPaths
) -> None:
    node = "gb200-r1-n00"
    await asyncio.to_thread(node_op, hosts_sim, "stop", node)
    try:
        table = await asyncio.to_thread(node_op, hosts_sim, "nodes", "")
        assert not table[node]["running"]
        assert all(v["running"] for n, v in table.items() if n != node), table
        await wait_for(admin, Node, node, lambda n: not _ready(n), timeout=60)
    finally:
        await asyncio.to_thread(node_op, hosts_sim, "start", node)
    await wait_for(admin, Node, node, _ready, timeout=60)
    with pytest.raises(errors.SimError, match="no node named 'gb200-r9-n00'"):
        await asyncio.to_thread(node_op, hosts_sim, "stop", "gb200-r9-n00")


async def test_a_host_that_dies_fails_the_sim_with_its_reason(
    hosts_sim: state.SimPaths,
) -> None:
    """Last in this module: the sim does not survive it."""
    victim = _host_pids(hosts_sim)[1]
    os.kill(victim, signal.SIGKILL)

    async def failed() -> state.SimState:
        while True:
            rec = state.read_state(hosts_sim)
            if rec is not None and rec.phase == "failed":
                return rec
            # The supervisor is another process; its record is the only channel.
            await asyncio.sleep(0.2)

    rec = await asyncio.wait_for(failed(), 60)
    assert f"(pid {victim}, 2 nodes) exited with code -9" in rec.error, rec.error
    assert "node host 1" in rec.error
