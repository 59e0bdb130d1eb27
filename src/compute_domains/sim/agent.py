"""The node agent: many simulated nodes in one process, with their folders and credentials.

For each node of the shape it prepares the node's "host" filesystem (kubelet folders, CDI
folders, a boot id, and the NVIDIA driver installation with its procfs stand-ins as a GB200 host
has them, ``sim.driverroot``), issues the node's client and serving certificates from the sim's CA,
and runs a ``SimNode``. Node faults (stop, start, reboot) act on one node without touching the
others.

With virtual nodes the agent is the node host that owns the process's shared caches
(``infra.kube.informers.Informers``, issue 28): one list+watch per kind (bound pods, Nodes, our
driver's ResourceSlices, cliques, ComputeDomains) serves every simulated kubelet and every
in-process plugin, daemon and agent of the host, as controller-runtime's manager serves every
controller of a process. It reads with the host's own identity (a client certificate of the
sim's CA in ``system:masters``, as kwok reads with its own), since one watch cannot carry the
credentials of each node and pod it serves; each component still writes, and reads what it
does not follow, with its own credentials, so the Node authorizer, NodeRestriction and the
chart's RBAC still apply to every write. Process-mode nodes keep one watch per component.

Node roots live under a short ``/tmp/cd-<hash>/`` folder because unix socket paths of kubelet
plugins must stay under 108 bytes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

from lightkube import AsyncClient

from compute_domains.containers import runtime, virtual
from compute_domains.infra import atomicfile, kube
from compute_domains.infra.kube import informers as kube_informers
from compute_domains.sim import driverroot, images, pki, topology
from compute_domains.sim.dranet import service as dranet
from compute_domains.sim.kubelet import config, node, nri, server
from compute_domains.sim.nvml import config as nvml_config

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AgentSettings:
    """What the agent needs to run a shape of nodes."""

    shape: topology.Shape
    sim_root: Path
    """The sim's folder (``nodes`` there links to the node roots)."""
    pki_dir: Path
    """The control plane's PKI folder (CA that signs node certificates)."""
    api_server: str
    """``https://127.0.0.1:<port>``."""
    isolate: bool
    """Private mount namespaces for containers (root only)."""
    nvml_lib_dir: Path | None = None
    """Folder holding the NVML stand-in ``libnvidia-ml.so.1`` (copied into every node's driver
    root); None leaves nodes without NVML."""
    stand_in_bin: Path | None = None
    """Folder with the workload stand-ins put on the PATH of user images (never IMEX)."""
    image_map: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    """Image repository → folder of its files (``sim.images``)."""
    address_slot: int = 0
    """Loopback address slot of this sim (``sim.slots``)."""
    releases: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    """Project image tag → ``bin`` folder of an earlier release (``sim.releases``); none by
    default, so every tag runs this installation."""
    kubelet: config.KubeletSettings = dataclasses.field(default_factory=config.KubeletSettings)
    virtual_nodes: bool = False
    """Virtual nodes: containers whose program is known run as tasks of this process
    (``containers.virtual``); False: every container is a process."""
    programs: virtual.Programs | None = None
    """With ``virtual_nodes``: the in-process programs (``pause`` always is one)."""
    nodes: frozenset[str] | None = None
    """The nodes this agent runs (a node host's share, ``sim.hosts``); None: the whole shape."""
    shared_informers: bool = True
    """With ``virtual_nodes``: one watch per kind for the whole host (the module docstring);
    False: every in-process component opens its own, as in process mode (a measurement's
    baseline)."""
    dranet: bool = False
    """Run DRANET's stand-in (``sim.dranet``) on the GPU nodes: the ``dra.net`` DRA driver
    with each node's RDMA NICs. Its namespace and RBAC must exist (``dranet.install``)."""


def nodes_base(sim_root: Path) -> Path:
    """Short folder holding every node root of one sim."""
    digest = hashlib.sha256(str(sim_root.resolve()).encode()).hexdigest()[:8]
    return Path("/tmp") / f"cd-{digest}"


def prepare_base(sim_root: Path) -> Path:
    """Create the nodes' short folder and the sim folder's ``nodes`` link to it."""
    base = nodes_base(sim_root)
    base.mkdir(parents=True, exist_ok=True)
    link = sim_root / "nodes"
    if not link.is_symlink():
        link.symlink_to(base)
    return base


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

    def __init__(self, settings: AgentSettings) -> None:
        self._s = settings
        self.base = nodes_base(settings.sim_root)
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

    def _prepare_root(self, spec: topology.NodeSpec, new_boot: bool) -> Path:
        root = self.root_of(spec.name)
        for sub in (
            "var/lib/kubelet/plugins",
            "var/lib/kubelet/plugins_registry",
            "var/run/cdi",
            "etc/cdi",
            "var/log/pods",
            "proc/sys/kernel/random",
            "etc/kubernetes",
            "containers",
        ):
            (root / sub).mkdir(parents=True, exist_ok=True)
        boot = root / "proc/sys/kernel/random/boot_id"
        if new_boot:
            # /var/run is a tmpfs: a reboot empties it (pod network namespaces, DRANET's store).
            shutil.rmtree(root / "var/run/netns", ignore_errors=True)
            shutil.rmtree(root / "var/run/dranet", ignore_errors=True)
        if new_boot or not boot.exists():
            atomicfile.write_atomic(boot, f"{uuid.uuid4()}\n", durable=False)
        lib = self._s.nvml_lib_dir
        if spec.gpus:  # the control-plane node has no GPU, hence no NVIDIA driver
            driverroot.layout(
                root,
                topology.nvml_for(spec),
                None if lib is None else lib / nvml_config.LIBRARY_NAME,
            )
        return root

    def _credentials(self, spec: topology.NodeSpec, root: Path) -> tuple[Path, server.TlsFiles]:
        ca = pki.KeyPair(
            (self._s.pki_dir / "ca.crt").read_bytes(), (self._s.pki_dir / "ca.key").read_bytes()
        )
        kc = root / "etc/kubernetes/kubelet.conf"
        # Fresh credentials once per agent: a folder left by an earlier sim at the same path
        # would otherwise point the node at that sim's API server and CA.
        if spec.name not in self._credentialed:
            client = pki.issue(
                ca, f"system:node:{spec.name}", organizations=("system:nodes",), client=True
            )
            kc.touch(mode=0o600)
            kc.write_text(
                pki.kubeconfig(
                    server=self._s.api_server,
                    ca_pem=ca.cert_pem,
                    client=client,
                    user=f"system:node:{spec.name}",
                )
            )
            serving = pki.issue(
                ca, spec.name, server=True, dns_names=(spec.name,), ip_addresses=(spec.address,)
            )
            serving.write(root / "etc/kubernetes", "kubelet")
            (root / "etc/kubernetes/ca.crt").write_bytes(ca.cert_pem)
            self._credentialed.add(spec.name)
        tls = server.TlsFiles(
            cert=root / "etc/kubernetes/kubelet.crt",
            key=root / "etc/kubernetes/kubelet.key",
            ca=root / "etc/kubernetes/ca.crt",
        )
        return kc, tls

    async def _make_node(self, name: str, new_boot: bool = False) -> node.SimNode:
        spec = self.specs[name]
        root = await asyncio.to_thread(self._prepare_root, spec, new_boot)
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
        ca = pki.KeyPair(
            (self._s.pki_dir / "ca.crt").read_bytes(), (self._s.pki_dir / "ca.key").read_bytes()
        )
        ident = f"compute-domains:node-host:{os.getpid()}"
        kc = self.base / f"node-host-{os.getpid()}.conf"
        kc.touch(mode=0o600)
        kc.write_text(
            pki.kubeconfig(
                server=self._s.api_server,
                ca_pem=ca.cert_pem,
                client=pki.issue(ca, ident, organizations=("system:masters",), client=True),
                user=ident,
            )
        )
        return kube.client(kube.KubeSettings(kubeconfig=kc, field_manager="node-host"))

    async def run(self, ready: asyncio.Event | None = None) -> None:
        """Start every node (a few at a time), then serve until cancelled."""
        prepare_base(self._s.sim_root)
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
