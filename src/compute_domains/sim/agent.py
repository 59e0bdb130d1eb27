"""The node agent: many simulated nodes in one process, with their folders and credentials.

For each node of the shape it prepares the node's "host" filesystem and issues the node's
client and serving certificates from the sim's CA (``sim.noderoot``: kubelet and CDI folders,
a boot id, the NVIDIA driver installation as a GB200 host has it), builds the node's API
client and container runtime, and runs a ``SimNode``. Node faults (stop, start, reboot) act on
one node without touching the others.

With virtual nodes the agent is the node host that owns the process's shared caches
(``infra.kube.informers.Informers``, issue 28): one list+watch per kind (bound pods, Nodes, our
driver's ResourceSlices, cliques, ComputeDomains) serves every simulated kubelet and every
in-process plugin, daemon and agent of the host, as controller-runtime's manager serves every
controller of a process. It reads with the host's own identity (a client certificate of the
sim's CA in ``system:masters``, as kwok reads with its own: ``noderoot.host_kubeconfig``),
since one watch cannot carry the credentials of each node and pod it serves; each component
still writes, and reads what it does not follow, with its own credentials, so the Node
authorizer, NodeRestriction and the chart's RBAC still apply to every write. Process-mode
nodes keep one watch per component.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
from pathlib import Path

from lightkube import AsyncClient

from compute_domains.containers import runtime, virtual
from compute_domains.infra import kube
from compute_domains.infra.kube import informers as kube_informers
from compute_domains.sim import agentconfig, images, noderoot, topology
from compute_domains.sim.dranet import service as dranet
from compute_domains.sim.kubelet import config, node, nri, server

logger = logging.getLogger(__name__)


def install_executor(nodes: int) -> None:
    """Give the running loop a default executor of two threads per node (at least 32).

    Every node's kubelet runs its blocking steps (the DRA claim checkpoint's writes with their
    fsyncs, the netns view) in this process's default executor; asyncio's default of
    min(32, cores + 4) threads (6 on 2 cores) lets one node's checkpoint write wait for other
    nodes' to finish, which real kubelets, one process each, never do (issue 26 point 6: claim
    steps were seen ending up to 1.3 s after their plugin's prepare returned, with this queue
    as one cause; how much of it was this queue was not measured apart).
    """
    asyncio.get_running_loop().set_default_executor(
        concurrent.futures.ThreadPoolExecutor(
            max_workers=max(32, 2 * nodes), thread_name_prefix="node-host"
        )
    )


class NodeAgent:
    """Runs the shape's nodes until cancelled; offers per-node faults."""

    def __init__(self, settings: agentconfig.AgentSettings) -> None:
        self._s = settings
        self.base = noderoot.nodes_base(settings.sim_root)
        self.specs = {
            spec.name: spec
            for spec in topology.all_nodes(settings.shape, settings.address_slot)
            if settings.nodes is None or spec.name in settings.nodes
        }
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._clients: dict[str, AsyncClient] = {}
        self.informers: kube_informers.Informers | None = None
        """The host's shared caches, once ``run`` built them (virtual nodes only)."""
        self.nodes: dict[str, node.SimNode] = {}
        self._credentialed: set[str] = set()
        self._dranet: dranet.Dranet | None = None
        self._registry = images.ImageRegistry(
            stand_in_bin=settings.stand_in_bin,
            releases=dict(settings.releases),
            image_map=dict(settings.image_map),
        )
        api = settings.api_server.removeprefix("https://")
        self._api_host, self._api_port = api.rsplit(":", 1)

    def root_of(self, name: str) -> Path:
        """A node's root folder."""
        return self.base / name

    def _credentials(self, spec: topology.NodeSpec, root: Path) -> tuple[Path, server.TlsFiles]:
        # Fresh credentials once per agent: a folder left by an earlier sim at the same path
        # would otherwise point the node at that sim's API server and CA.
        kc, tls = noderoot.credentials(
            root,
            spec,
            pki_dir=self._s.pki_dir,
            api_server=self._s.api_server,
            fresh=spec.name not in self._credentialed,
        )
        self._credentialed.add(spec.name)
        return kc, tls

    async def _make_node(self, name: str, new_boot: bool = False) -> node.SimNode:
        spec = self.specs[name]
        root = await asyncio.to_thread(
            noderoot.prepare_root,
            self.root_of(spec.name),
            spec,
            new_boot=new_boot,
            nvml_lib_dir=self._s.nvml_lib_dir,
        )
        kc, tls = await asyncio.to_thread(self._credentials, spec, root)
        # Kept past the Lease interval: a kubelet holds its API connection (1,152 nodes
        # reconnecting for every renewal spent a third of the sim's loop on TLS handshakes);
        # and under the API server's 90 s idle timeout, so a kept connection is never stale.
        # HTTP/1.1: a connection per watch and one for requests. HTTP/2 (one connection, as
        # client-go) was tried when one process held all 1,152 nodes and ran out of open
        # files; with node hosts (``sim.hosts``) files are no longer short, and Python's
        # HTTP/2 cost more CPU: R = 16 came up in 74 s with it, 61 s without (hosts 62 → 50
        # CPU-s, API server 40 → 36).
        client = kube.client(
            kube.KubeSettings(kubeconfig=kc, field_manager="kubelet", keepalive_s=30.0, http2=False)
        )
        old = self._clients.pop(name, None)
        if old is not None:
            await old.close()
        self._clients[name] = client
        extra: tuple[str, ...] = (str(self._s.stand_in_bin),) if self._s.stand_in_bin else ()
        # A release's venv must be visible inside containers wherever its cache lives.
        extra += tuple(str(b.parent) for b in self._s.releases.values())
        rt_settings = runtime.RuntimeSettings(
            isolate=self._s.isolate, extra_system_dirs=extra, node_proc=root / "proc"
        )
        rt = (
            virtual.VirtualRuntime(
                rt_settings, root / "containers", self._s.programs, informers=self.informers
            )
            if self._s.virtual_nodes
            else runtime.Runtime(rt_settings, root / "containers")
        )
        settings = config.NodeSettings(
            spec=spec,
            root=root,
            api_host=self._api_host,
            api_port=int(self._api_port),
            kubelet=self._s.kubelet,
        )
        hooks: list[nri.Plugin] = []
        if self._dranet is not None:
            dranet_hooks = await self._dranet.start_node(spec, root)
            if dranet_hooks is not None:
                hooks.append(dranet_hooks)
        return node.SimNode(
            settings, client, rt, self._registry, tls, shared=self.informers, nri_plugins=hooks
        )

    async def start_node(self, name: str, new_boot: bool = False) -> None:
        """Start (or restart) one node's kubelet."""
        if name not in self.specs:
            raise KeyError(f"no node named {name!r} in this sim")
        if name in self._tasks and not self._tasks[name].done():
            return
        sim_node = await self._make_node(name, new_boot)
        self.nodes[name] = sim_node
        self._tasks[name] = asyncio.create_task(self._guard(sim_node), name=f"node:{name}")
        await sim_node.registered.wait()
        if self._dranet is not None:
            self._dranet.node_registered(name)

    def registered(self) -> int:
        """How many nodes have registered their Node object so far."""
        return sum(n.registered.is_set() for n in self.nodes.values())

    def running(self, name: str) -> bool:
        """True while the node's kubelet runs (not stopped)."""
        task = self._tasks.get(name)
        return task is not None and not task.done()

    async def _guard(self, sim_node: node.SimNode) -> None:
        try:
            await sim_node.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("node %s failed", sim_node.name)

    async def stop_node(self, name: str) -> None:
        """Stop one node: heartbeats end, its containers are killed (a power cut)."""
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._dranet is not None:
            await self._dranet.stop_node(name)
        logger.info("node %s stopped", name)

    async def reboot_node(self, name: str) -> None:
        """Stop and start one node with a new boot id."""
        await self.stop_node(name)
        await self.start_node(name, new_boot=True)

    async def node_table(self) -> dict[str, dict[str, object]]:
        """Every node of this agent: whether it runs, its address and clique, and the DRA
        drivers its kubelet has registered (what a pod's claims can be prepared by)."""
        return {
            n: {
                "running": n in self.nodes and self.running(n),
                "address": spec.address,
                "clique": spec.clique,
                "drivers": self.nodes[n].dra.registered_drivers() if n in self.nodes else [],
            }
            for n, spec in self.specs.items()
        }

    async def act(self, op: str, name: str) -> None:
        """A node fault: ``stop``, ``start`` or ``reboot``; ValueError for another."""
        if op == "stop":
            await self.stop_node(name)
        elif op == "start":
            await self.start_node(name)
        elif op == "reboot":
            await self.reboot_node(name)
        else:
            raise ValueError(f"unknown operation {op!r}")

    def _host_client(self) -> AsyncClient:
        """The client of the host's shared caches (see the module docstring)."""
        kc = noderoot.host_kubeconfig(
            self.base, pki_dir=self._s.pki_dir, api_server=self._s.api_server
        )
        return kube.client(kube.KubeSettings(kubeconfig=kc, field_manager="node-host"))

    async def run(self, ready: asyncio.Event | None = None) -> None:
        """Start every node (a few at a time), then serve until cancelled."""
        noderoot.prepare_base(self._s.sim_root)
        install_executor(len(self.specs))
        if self._s.virtual_nodes and self._s.shared_informers:
            host_client = await asyncio.to_thread(self._host_client)
            self.informers = kube_informers.Informers(
                host_client, name="node-host", nodes=frozenset(self.specs)
            )
            try:
                async with asyncio.TaskGroup() as tg:
                    tg.create_task(self.informers.run(), name="host-informers")
                    await self._serve(ready)  # ends only by cancellation
            finally:
                await host_client.close()
        else:
            await self._serve(ready)

    async def _serve(self, ready: asyncio.Event | None) -> None:
        sem = asyncio.Semaphore(8)
        dranet_task: asyncio.Task[None] | None = None
        if self._s.dranet:
            api = await asyncio.to_thread(
                dranet.client, self._s.pki_dir, self._s.api_server, self.base
            )
            self._dranet = dranet.Dranet(api)
            dranet_task = asyncio.create_task(self._dranet.run(), name="dranet")

        async def one(name: str) -> None:
            async with sem:
                await self.start_node(name)

        try:
            await asyncio.gather(*(one(n) for n in self.specs))
            logger.info("%d nodes registered", len(self.specs))
            if ready is not None:
                ready.set()
            await asyncio.Event().wait()
        finally:
            for name in list(self._tasks):
                await self.stop_node(name)
            if dranet_task is not None:
                dranet_task.cancel()
                await asyncio.gather(dranet_task, return_exceptions=True)
            for client in self._clients.values():
                with contextlib.suppress(Exception):
                    await client.close()
