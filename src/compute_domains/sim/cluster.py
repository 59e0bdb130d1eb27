"""The sim supervisor: one long-lived process that owns everything a simulated cluster runs.

``cdctl sim up`` starts it detached (``cdctl sim serve``); it runs the control plane and records
its phase in ``state.json`` (``starting`` → ``ready``, or ``failed`` with the reason). SIGTERM or
SIGINT stops everything in order. Every child it starts dies with it (see ``containers.procs``),
so a killed supervisor leaves no process behind, only its folder, which the next ``up``
recognises as stale and removes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import time
from pathlib import Path
from typing import Literal

from compute_domains.containers import virtual
from compute_domains.infra import errors, kube, tasks
from compute_domains.sim import (
    agent,
    agentconfig,
    control,
    controlplane,
    hosts,
    limits,
    progress,
    releases,
    slots,
    standins,
    state,
    topology,
)
from compute_domains.sim import driver as driver_mod
from compute_domains.sim import errors as sim_errors
from compute_domains.sim.dranet import service as dranet
from compute_domains.sim.kubelet import config, nodestatus
from compute_domains.sim.nvml import build as nvml_build

logger = logging.getLogger(__name__)

NodesMode = Literal["process", "virtual"]
"""How simulated nodes run their containers (``SimSettings.nodes_mode``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SimSettings:
    """Everything one simulated cluster needs to start."""

    home: Path
    """Sim home (``$CD_SIM_HOME``); this sim lives in ``<home>/sims/<name>``, and earlier
    releases offered to its sims in ``<home>/releases/<image tag>`` (``sim.releases``)."""
    name: str
    """Name of the sim; several sims run side by side under distinct names."""
    bin_dir: Path
    """Folder with the built upstream tools."""
    api_port: int | None = None
    """Fixed API server port, or None for a free one."""
    shape: topology.Shape = dataclasses.field(
        default_factory=lambda: topology.Shape(racks=0, nodes_per_rack=1)
    )
    """Simulated nodes to run (none by default: a bare control plane)."""
    isolate: bool = True
    """Private mount namespaces for containers (needs root)."""
    kubelet: config.KubeletSettings = dataclasses.field(default_factory=config.KubeletSettings)
    """Timings of the simulated kubelets."""
    driver: driver_mod.DriverSettings | None = None
    """Install the project's Helm chart once the nodes are up (None: a cluster without it)."""
    image_map: tuple[tuple[str, Path], ...] = ()
    """Image repository → folder of that image's files (``sim.images``): e.g. another driver's
    programs, run by its own chart as on a real cluster."""
    patience: bool = False
    """Upstream's node-lifecycle timings (NotReady after 40 s without a heartbeat, eviction
    after 300 s) instead of the fast ones fault drills use (8 s, 10 s): for long, heavy runs
    (demo, benchmarks) where a loaded 2-core machine may delay heartbeats by seconds, and an
    evicted workload would measure the machine instead of the driver. The kubelets then renew
    their Leases every 10 s, as upstream's do (``config.UPSTREAM_HEARTBEATS``), instead of 2 s:
    at 1,152 nodes that is 115 Lease writes a second instead of 576."""
    nodes_mode: NodesMode = "process"
    """How the nodes' containers run: ``process`` (a process each, in its own view: fidelity,
    and any driver's images) or ``virtual`` (the project's components, ``pause`` and the
    programs ``programs`` knows as tasks of this process: scale; docs/decisions/0010)."""
    programs: virtual.Programs | None = None
    """Virtual mode: which containers run in-process (the CLI's table of the project's
    commands); None runs only ``pause`` in-process."""
    shared_informers: bool = True
    """Virtual mode: each node host serves its in-process components from one watch per kind
    (``sim.agent``, issue 28); False: each component opens its own, as in a process."""
    dranet: bool = False
    """Run DRANET's stand-in (``sim.dranet``): the ``dra.net`` DRA driver with each GPU node's
    four RDMA NICs, as the deployment guide installs DRANET (§3.3)."""
    racks_per_host: int | None = None
    """Virtual mode: run the nodes in node host processes of this many racks each
    (``sim.hosts``); None: of ``hosts.DEFAULT_RACKS_PER_HOST`` racks each when the shape has
    more racks than that, else in the supervisor itself."""


class SimCluster:
    """Runs one sim until cancelled; writes its phase to ``state.json`` as it goes."""

    def __init__(self, settings: SimSettings) -> None:
        self._s = settings
        self.paths = state.SimPaths(settings.home, settings.name)
        self._nodes_ready = asyncio.Event()
        self._agent: agent.NodeAgent | hosts.NodeHosts | None = None
        self._reporter: asyncio.Task[None] | None = None

    def _record(self, phase: state.Phase, error: str = "", progress: str = "") -> None:
        state.write_state(
            self.paths,
            state.SimState(
                name=self._s.name,
                phase=phase,
                supervisor_pid=os.getpid(),
                bin_dir=str(self._s.bin_dir),
                created=self._created,
                error=error,
                extra={"nodesMode": self._s.nodes_mode}
                | ({"progress": progress} if progress else {})
                | (
                    {"nodeHosts": self._agent.pids()}
                    if isinstance(self._agent, hosts.NodeHosts)
                    else {}
                ),
            ),
        )

    async def run(self) -> None:
        """Start the control plane, mark the sim ready, serve until cancelled."""
        self._created = time.time()
        self._record("starting")
        cp = controlplane.ControlPlane(
            controlplane.ControlPlaneSettings(
                state_dir=self.paths.control_plane,
                bin_dir=self._s.bin_dir,
                api_port=self._s.api_port,
                **(
                    {"node_monitor_grace_s": 40, "eviction_toleration_s": 300}
                    if self._s.patience
                    else {}
                ),
            )
        )
        task = asyncio.create_task(cp.run(), name="control-plane")
        ready = asyncio.create_task(cp.ready.wait(), name="control-plane-ready")
        nodes: asyncio.Task[None] | None = None
        try:
            done, _ = await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                task.result()  # raises the start-up failure
                raise sim_errors.SimError("control plane stopped before it was ready")
            if self._s.shape.total_nodes:
                if self._s.dranet:
                    await self._install_dranet()
                nodes = asyncio.create_task(self._run_nodes(cp), name="nodes")
                self._reporter = asyncio.create_task(self._progress(), name="progress")
                nodes_ready = asyncio.create_task(self._nodes_ready.wait())
                done, _ = await asyncio.wait(
                    {task, nodes, nodes_ready}, return_when=asyncio.FIRST_COMPLETED
                )
                for t in (task, nodes):
                    if t in done:
                        t.result()
                        raise sim_errors.SimError(f"{t.get_name()} stopped during start-up")
                if self._s.shape.control_plane:
                    await self._mark_control_plane()
                if self._s.driver is not None:
                    inst = asyncio.create_task(
                        driver_mod.install(
                            self._s.driver, self._s.bin_dir / "helm", self.paths.kubeconfig
                        ),
                        name="driver-install",
                    )
                    done, _ = await asyncio.wait(
                        {task, nodes, inst}, return_when=asyncio.FIRST_COMPLETED
                    )
                    for t in (task, nodes):
                        if t in done:
                            t.result()
                            raise sim_errors.SimError(f"{t.get_name()} stopped during start-up")
                    inst.result()
                await self._stop_reporter()
                self._record("ready")
                # Not gather: cancelling a gather cancels both at once; the teardown below
                # stops the nodes before the control plane.
                ended, _ = await asyncio.wait({task, nodes}, return_when=asyncio.FIRST_EXCEPTION)
                for t in ended:
                    t.result()
                return
            # A bare control plane: its socket serves the control-plane drills alone.
            server = control.ControlServer(self.paths.root / "control.sock", None, control_plane=cp)
            serving = asyncio.create_task(server.run(), name="control-socket")
            self._record("ready")
            try:
                await task
            finally:
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
        except asyncio.CancelledError:
            await self._stop_reporter()
            self._record("stopping")
            if nodes is not None:
                # Nodes first, as when machines are shut down before their control plane: each
                # container ends with every process it started.
                nodes.cancel()
                await asyncio.gather(nodes, return_exceptions=True)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise
        except errors.ComputeDomainsError as err:
            await self._stop_reporter()
            self._record("failed", str(err))
            raise
        finally:
            ready.cancel()
            await self._stop_reporter()

    async def _stop_reporter(self) -> None:
        if self._reporter is not None:
            self._reporter.cancel()
            await asyncio.gather(self._reporter, return_exceptions=True)
            self._reporter = None

    async def _progress(self) -> None:
        driver = self._s.driver
        await progress.report(
            lambda line: self._record("starting", progress=line),
            lambda: self._agent.registered() if self._agent else 0,
            len(list(topology.all_nodes(self._s.shape))),
            None
            if driver is None
            else lambda: kube.client(
                kube.KubeSettings(kubeconfig=self.paths.kubeconfig, field_manager="sim")
            ),
            driver.namespace if driver else "",
        )

    async def _mark_control_plane(self) -> None:
        """Label the control-plane node as ``kubeadm init`` does, with the admin's credentials."""
        admin = kube.client(
            kube.KubeSettings(kubeconfig=self.paths.kubeconfig, field_manager="kubeadm")
        )
        try:
            await nodestatus.mark_control_plane(admin, topology.CONTROL_PLANE_NODE)
        finally:
            await admin.close()

    async def _install_dranet(self) -> None:
        """DRANET's namespace and RBAC, as its chart creates them (before its nodes start)."""
        admin = kube.client(
            kube.KubeSettings(kubeconfig=self.paths.kubeconfig, field_manager="helm")
        )
        try:
            await dranet.install(admin)
        finally:
            await admin.close()

    async def _run_nodes(self, cp: controlplane.ControlPlane) -> None:
        assert cp.endpoints is not None
        root = self.paths.root
        slot, _slot_fd = slots.acquire()  # held (fd open) for the supervisor's life
        lib_dir = await asyncio.to_thread(nvml_build.build_library, root / "lib")
        bin_dir = standins.install(root / "bin")
        agent_settings = agentconfig.AgentSettings(
            shape=self._s.shape,
            sim_root=root,
            pki_dir=self.paths.control_plane / "pki",
            api_server=cp.endpoints.api_server,
            isolate=self._s.isolate,
            nvml_lib_dir=lib_dir.parent,
            address_slot=slot,
            stand_in_bin=bin_dir,
            image_map=dict(self._s.image_map),
            releases=releases.installed(self._s.home / "releases"),
            kubelet=dataclasses.replace(self._s.kubelet, **config.UPSTREAM_HEARTBEATS)
            if self._s.patience
            else self._s.kubelet,
            virtual_nodes=self._s.nodes_mode == "virtual",
            shared_informers=self._s.shared_informers,
            programs=self._s.programs,
            dranet=self._s.dranet,
        )
        per_host = hosts.racks_per_host(
            self._s.shape, self._s.racks_per_host, self._s.nodes_mode == "virtual"
        )
        node_agent: agent.NodeAgent | hosts.NodeHosts = (
            agent.NodeAgent(agent_settings)
            if per_host is None
            else hosts.NodeHosts(agent_settings, per_host)
        )
        self._agent = node_agent
        server = control.ControlServer(root / "control.sock", node_agent, control_plane=cp)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(server.run(), name="control-socket")
                tg.create_task(node_agent.run(self._nodes_ready), name="node-agent")
        except ExceptionGroup as group:
            # A node host that exited: the sim's failure, with its reason (``run`` records it).
            failed = [e for e in tasks.leaves(group) if isinstance(e, sim_errors.SimError)]
            if not failed:
                raise
            raise failed[0] from group


async def serve(settings: SimSettings) -> int:
    """Entry point of the supervisor process: run until SIGTERM/SIGINT; exit code for the CLI."""
    limits.raise_open_files(len(list(topology.all_nodes(settings.shape))))
    cluster = SimCluster(settings)
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
    try:
        await cluster.run()
    except asyncio.CancelledError:
        logger.info("sim %s stopped", settings.name)
        return 0
    except errors.ComputeDomainsError as err:
        logger.error("sim %s failed: %s", settings.name, err)
        return 1
    return 0
