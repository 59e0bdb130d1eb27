"""Fixtures for kubelet-plugin integration tests: a two-node sim, CRDs, DeviceClasses, plugins.

One sim per test module (one rack of two simulated GB200 nodes). Each test gets a driver and a
user namespace and starts plugins with ``start_plugin(node)``: the real ``Plugin.run()`` as an
asyncio task in this process, pointed at the node's root folder (``host_root``), so the node's
simulated kubelet registers it from its ``plugins_registry`` and calls it for the pods bound to
that node. The plugin uses the admin kubeconfig (the node's own credentials lack the plugin's
RBAC) and a plain-data discovery result matching the node's NVML stand-in (one process can load
only one NVML library; ``test_cli`` covers the real NVML path in a subprocess).

No controller and no daemon run here: tests create the ComputeDomain, its clique (with this
node's entry Ready, as a daemon would write it) and the workload claim template by hand.
At teardown, pods are deleted while the plugins still run (so the kubelet unprepares them),
then the plugins are stopped and the namespaces deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Event, Namespace, Node, Pod
from lightkube.resources.resource_v1 import DeviceClass

from compute_domains.api import crds
from compute_domains.infra import kube
from compute_domains.plugin import app, config, nodeinfo
from compute_domains.sim import driverroot, lifecycle, state, toolchain, topology
from tests.conftest import keep_sims
from tests.integration.helpers import wait_for, wait_gone

SHAPE = topology.Shape(racks=1, nodes_per_rack=2, gpus_per_node=4, plain_nodes=1)
NODES = [spec.name for spec in topology.nodes(SHAPE) if spec.rack is not None]
"""The two nodes of the rack (one NVLink clique)."""
PLAIN_NODE = next(spec.name for spec in topology.nodes(SHAPE) if spec.rack is None)
"""A GPU node without multi-node NVLink (no clique ID)."""
CHART = Path(__file__).resolve().parents[3] / "deploy/helm/compute-domains"
CAPABILITY = "DeviceFileMinor: 7\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
"""fabric-imex-mgmt capability stand-in written into each node root."""


class StaticDiscovery:
    """A discovery result given as plain data (what the node's NVML stand-in would answer)."""

    def __init__(self, info: nodeinfo.NodeInfo) -> None:
        self.info = info

    def discover(self) -> nodeinfo.NodeInfo:
        return self.info


def node_info(node: str) -> nodeinfo.NodeInfo:
    spec = next(s for s in topology.nodes(SHAPE) if s.name == node)
    return nodeinfo.NodeInfo(
        driver_version="580.95.05",
        gpus=(),
        clique_id=spec.clique,
        channel_major=driverroot.IMEX_CHANNEL_MAJOR,
        caps_major=driverroot.NVIDIA_CAPS_MAJOR,
    )


@pytest.fixture(scope="module")
def plugin_sim(toolset: toolchain.Toolset, sim_home: Path) -> Iterator[state.SimPaths]:
    paths = state.SimPaths(sim_home, f"plugin-{uuid.uuid4().hex[:4]}")
    started = lifecycle.start(paths, toolset.bin_dir, die_with_parent=True, shape=SHAPE)
    for node in [*NODES, PLAIN_NODE]:
        cap = paths.node_root(node) / "proc/driver/nvidia/capabilities/fabric-imex-mgmt"
        cap.parent.mkdir(parents=True, exist_ok=True)
        cap.write_text(CAPABILITY)
    yield paths
    lifecycle.stop(paths, process=started.process, remove=not keep_sims())


@pytest.fixture
async def admin(plugin_sim: state.SimPaths) -> AsyncIterator[AsyncClient]:
    c = kube.client(kube.KubeSettings(kubeconfig=plugin_sim.kubeconfig, field_manager="tests"))
    yield c
    await c.close()


@pytest.fixture
async def cluster(admin: AsyncClient, toolset: toolchain.Toolset) -> None:
    """CRDs (from ``api.crds``) and the chart's DeviceClasses, applied idempotently."""
    for manifest in crds.manifests().values():
        crd = CustomResourceDefinition.from_dict(manifest)
        await admin.apply(crd, field_manager="tests", force=True)
        assert crd.metadata is not None and crd.metadata.name
        await wait_for(
            admin,
            CustomResourceDefinition,
            crd.metadata.name,
            lambda c: any(
                x.type == "Established" and x.status == "True" for x in c.status.conditions or []
            ),
        )
    helm = str(toolset.path("helm"))
    only = ("--show-only", "templates/deviceclasses.yaml")
    rendered = subprocess.run(
        [helm, "template", "t", str(CHART), "-n", "cd", "--kube-version", "1.34.0", *only],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for doc in yaml.safe_load_all(rendered):
        if doc:
            await admin.apply(DeviceClass.from_dict(doc), field_manager="tests", force=True)


async def _namespace(admin: AsyncClient, prefix: str) -> str:
    from tests.integration.plugin import objects

    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    await objects.namespace(admin, name)
    return name


@dataclasses.dataclass
class Namespaces:
    driver: str
    user: str


@dataclasses.dataclass
class Running:
    plugin: app.Plugin
    task: asyncio.Task[None]
    settings: config.PluginSettings

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


StartPlugin = Callable[..., Awaitable[Running]]


def plugin_settings(
    sim: state.SimPaths, node: str, driver_ns: str, **overrides: Any
) -> config.PluginSettings:
    root = sim.node_root(node)
    paths = config.PathSettings(
        host_root=root,
        proc_devices=root / "proc/devices",
        boot_id=root / "proc/sys/kernel/random/boot_id",
        fabric_imex_mgmt=root / "proc/driver/nvidia/capabilities/fabric-imex-mgmt",
    )
    return config.PluginSettings(
        node_name=node,
        driver_namespace=driver_ns,
        paths=overrides.pop("paths", paths),
        kube=kube.KubeSettings(kubeconfig=sim.kubeconfig, field_manager=f"plugin-{node}"),
        retry=overrides.pop("retry", config.RetrySettings(budget_s=20.0, readiness_timeout_s=15.0)),
        **overrides,
    )


@pytest.fixture
async def spaces(admin: AsyncClient, cluster: None) -> AsyncIterator[Namespaces]:
    ns = Namespaces(
        driver=await _namespace(admin, "cdp-drv"), user=await _namespace(admin, "cdp-usr")
    )
    yield ns
    for name in (ns.user, ns.driver):
        with contextlib.suppress(ApiError):
            await admin.delete(Namespace, name)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
async def start_plugin(
    plugin_sim: state.SimPaths,
    admin: AsyncClient,
    spaces: Namespaces,
    request: pytest.FixtureRequest,
) -> AsyncIterator[StartPlugin]:
    """``await start_plugin(node, **settings)``: a registered, publishing plugin."""
    running: list[Running] = []

    async def start(node: str, **overrides: Any) -> Running:
        settings = plugin_settings(plugin_sim, node, spaces.driver, **overrides)
        plugin = app.Plugin(settings, StaticDiscovery(node_info(node)))
        task = asyncio.create_task(plugin.run(), name=f"plugin:{node}")
        handle = Running(plugin=plugin, task=task, settings=settings)
        running.append(handle)
        ready = asyncio.create_task(plugin.ready.wait())
        await asyncio.wait({ready, task}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
        assert plugin.ready.is_set(), "plugin did not start within 60 s"
        assert plugin.registration is not None
        try:
            await asyncio.wait_for(plugin.registration.registered.wait(), 30)
        except TimeoutError:
            tail = plugin_sim.supervisor_log.read_text(errors="replace").splitlines()[-40:]
            raise AssertionError(
                f"the kubelet of {node} did not register the plugin:\n" + "\n".join(tail)
            ) from None
        return handle

    yield start
    if request.node.stash.get(_FAILED, False):
        await _diagnostics(admin, spaces, plugin_sim)
    # Pods first, while plugins still run, so the kubelet can unprepare their claims.
    for ns in (spaces.user, spaces.driver):
        await _delete_pods(admin, ns)
    for handle in running:
        await handle.stop()


async def _delete_pods(admin: AsyncClient, namespace: str) -> None:
    names = [
        p.metadata.name
        async for p in admin.list(Pod, namespace=namespace)
        if p.metadata is not None and p.metadata.name
    ]
    for name in names:
        with contextlib.suppress(ApiError):
            await admin.delete(Pod, name, namespace=namespace, grace_period=0)
    for name in names:
        with contextlib.suppress(TimeoutError, ApiError):
            await wait_gone(admin, Pod, name, namespace, timeout=60)


async def _diagnostics(admin: AsyncClient, ns: Namespaces, sim: state.SimPaths) -> None:
    """Print what a failed test left: pods, events, node labels, checkpoints, the sim's log."""
    out = ["", "==== plugin test diagnostics ===="]
    for namespace in (ns.user, ns.driver):
        async for pod in admin.list(Pod, namespace=namespace):
            status = pod.status.to_dict() if pod.status else {}
            node = pod.spec.nodeName if pod.spec else None
            out.append(f"pod {namespace}/{pod.metadata.name} on {node}: {status}")
        async for event in admin.list(Event, namespace=namespace):
            obj = event.involvedObject
            out.append(f"event {obj.kind}/{obj.name} {event.reason}: {event.message}")
    for node in [*NODES, PLAIN_NODE]:
        n = await admin.get(Node, node)
        out.append(f"node {node} labels {n.metadata.labels}")
        path = sim.node_root(node) / "var/lib/kubelet/plugins/compute-domain.nvidia.com"
        cp = path / "checkpoint.json"
        out.append(f"checkpoint {node}: {cp.read_text() if cp.exists() else 'none'}")
    out.append("---- supervisor log tail ----")
    out += sim.supervisor_log.read_text(errors="replace").splitlines()[-80:]
    print("\n".join(out))
