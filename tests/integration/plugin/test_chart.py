"""The plugin as the chart deploys it: DaemonSet pods under the chart's ServiceAccount and RBAC.

The chart (CRDs, DeviceClasses, RBAC, DaemonSet) is installed with helm into a sim of its own
(controller scaled to zero: not under test here); the plugin pods find NVML through the node's
stand-in library, register with the simulated kubelets and publish their slices. A workload pod
then gets its channel, which exercises every API permission the plugin needs (claims,
ComputeDomains, cliques, node labels, slices).
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceSlice

from compute_domains.plugin import devices
from compute_domains.sim import driverroot, state, toolchain
from tests.integration.helpers import wait_for
from tests.integration.plugin import objects
from tests.integration.plugin.conftest import CHART, NODES, node_info

pytestmark = pytest.mark.integration

NODE_A = NODES[0]


async def test_the_chart_runs_a_plugin_per_node_with_enough_rights(
    admin: AsyncClient,
    plugin_sim: state.SimPaths,
    toolset: toolchain.Toolset,
) -> None:
    ns = f"cdp-chart-{uuid.uuid4().hex[:4]}"
    helm = [str(toolset.path("helm")), "--kubeconfig", str(plugin_sim.kubeconfig)]
    install = [*helm, "upgrade", "--install", "cd", str(CHART), "-n", ns, "--create-namespace"]
    install += [
        "--set",
        f"nvidiaDriverRoot={driverroot.DRIVER_ROOT}",
        "--set",
        "controller.replicas=0",
        # Objects named after this release ("cd-..."), not NVIDIA's cluster-wide names: another
        # install in the sim cannot collide with this one.
        "--set",
        "compat.nvidiaNames=false",
    ]
    install += ["--wait", "--timeout", "120s"]
    done = await asyncio.to_thread(subprocess.run, install, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        # One Ready plugin per GPU node of the sim: the rack's nodes and the plain GPU node.
        # Waited for: helm's --wait accepts a DaemonSet with maxUnavailable (1) pods not Ready
        # yet, which the earlier `numberReady >= len(NODES)` let through unnoticed.
        ds = await wait_for(
            admin,
            DaemonSet,
            "cd-kubelet-plugin",
            lambda d: bool(d.status and d.status.numberReady == len(NODES) + 1),
            namespace=ns,
            timeout=120,
        )
        assert ds.status is not None
        assert ds.status.desiredNumberScheduled == ds.status.numberReady == len(NODES) + 1
        for node in NODES:
            await wait_for(admin, ResourceSlice, devices.slice_name(node), lambda _s: True)
        user = f"cdp-chart-user-{uuid.uuid4().hex[:4]}"
        await objects.namespace(admin, user)
        uid = await objects.compute_domain(admin, user, "charted")
        await objects.ready_clique(admin, ns, uid, node_info(NODE_A).clique_id, [NODE_A])
        await objects.workload_template(admin, user, "charted", uid)
        script = "ls -l /dev/nvidia-caps-imex-channels; sleep 3600"
        await objects.pod(admin, user, "w", script, template="charted", node=NODE_A)
        await objects.running(admin, user, "w")
        await objects.log_containing(admin, user, "w", "channel0")
        assert await objects.node_label(admin, NODE_A) == uid
        await admin.delete(Pod, "w", namespace=user, grace_period=0)
        await objects.wait_label(admin, NODE_A, None)
    finally:
        uninstall = [*helm, "uninstall", "cd", "-n", ns, "--wait", "--timeout", "60s"]
        await asyncio.to_thread(subprocess.run, uninstall, capture_output=True, text=True)
