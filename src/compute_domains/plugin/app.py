"""Compose the kubelet plugin of one node and run it: ``Plugin.run()``.

Start-up order (any failure ends ``run`` with an exception; nothing is left listening):
1. Hardware discovery (NVML, ``/proc/devices``) in a worker thread; strict fabric checks.
2. Folders; the checkpoint is opened for the current boot (one NVIDIA's plugin left is taken
   over first, see ``plugin.takeover``; a checkpoint of an earlier boot is reset; a corrupt one
   stops start-up unless quarantining is enabled); the base CDI spec. Both are
   ``plugin.startup``'s steps, logged under this module's logger.
3. The Node's labels (warm spare, shared IMEX) are followed by a watch, seen before anything
   else: the first cleanup's unprepare of a stale claim keeps the folder of the CD the node is
   warm for (a resident agent serves it there, its IMEX config in that folder).
4. A first cleanup pass (stale claims, orphaned specs, a stray node label from before a reboot);
   then the shared-IMEX label is freed on an idle node when the shared IMEX is not eager
   (``eager``).
5. The DRA gRPC service (v1 + v1beta1), then the registration service, so the kubelet can use
   the endpoint as soon as it learns it.
6. Background tasks in one TaskGroup: ResourceSlice publisher, periodic cleanup, the eager
   shared-IMEX label (``eager``), optional metrics/health HTTP endpoint and gRPC health
   service. A failing task cancels the others.
Cancellation stops the gRPC servers (in-flight calls get a short grace) and removes our sockets;
the ResourceSlice stays, as upstream leaves it.

Many plugins can run in one process (the simulator does so): nothing here is global.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable

from lightkube import AsyncClient

from compute_domains.infra import bootid, kube, tasks
from compute_domains.infra import metrics as infra_metrics
from compute_domains.infra.kube import informers as kube_informers
from compute_domains.plugin import (
    cleanup,
    computedomain,
    discovery,
    driver,
    driverversion,
    eager,
    edits,
    grpc_server,
    health,
    metrics,
    nodeinfo,
    nodewatch,
    registration,
    resourceslice,
    shared,
    startup,
    state,
)
from compute_domains.plugin.config import PluginSettings

logger = logging.getLogger(__name__)


class Plugin:
    """The DRA kubelet plugin of one node."""

    def __init__(
        self,
        settings: PluginSettings,
        hardware: nodeinfo.Discovery,
        informers: kube_informers.Informers | None = None,
    ) -> None:
        """Args: settings: everything configurable; hardware: discovery (NVML in production);
        informers: the host's shared caches (a virtual node's plugin: one watch per kind for
        every node of the host, issue 28), None to open this plugin's own watches."""
        self._s = settings
        self._informers = informers
        self._discovery = hardware
        self.metrics = metrics.PluginMetrics(settings.node_name)
        self.ready = asyncio.Event()
        """Set once the kubelet sockets listen and the slice publisher runs."""
        self.registration: registration.RegistrationServicer | None = None
        self.device_state: state.DeviceState | None = None
        self.http: infra_metrics.HttpEndpoint | None = None

    async def run(self) -> None:
        """Serve the node until cancelled."""
        s, paths = self._s, self._s.paths
        extra = {"node": s.node_name}
        try:
            info = await asyncio.to_thread(self._discovery.discover)
        except nodeinfo.DiscoveryError as err:
            seen_at = paths.driver_root_view
            raise discovery.with_driver_root(
                err, driver_root=paths.driver_root, seen_at=seen_at
            ) from err.__cause__
        logger.info(
            "discovered %d GPUs, driver %s, clique %r",
            len(info.gpus),
            info.driver_version,
            info.clique_id,
            extra=extra,
        )
        if info.binding is not None:  # a binding that reads fabric info wrongly is named here
            logger.info("NVML binding %s", info.binding.summary(), extra=extra)
        if info.clique_id:  # NVIDIA's words for the same finding (tooling greps them)
            logger.info("identified fabric clique UUID/ID: %s", info.clique_id, extra=extra)
        driverversion.validate(info.driver_version, s.node_name)
        boot_id = await asyncio.to_thread(bootid.read_boot_id, paths.boot_id)
        await asyncio.to_thread(
            startup.prepare_folders, paths, info.driver_version, node=s.node_name, log=logger
        )
        async with kube.client(s.kube) as client:
            await self._serve(client, info, boot_id)

    async def _serve(self, client: AsyncClient, info: nodeinfo.NodeInfo, boot_id: str) -> None:
        s, paths = self._s, self._s.paths
        publisher: resourceslice.SlicePublisher | None = None
        joiner: eager.SharedLabel | None = None
        # In its own process the plugin watches the ComputeDomains itself (a virtual node's
        # plugin reads its host's cache): a prepare then finds its CD without an API call.
        watched = computedomain.own_cache(client) if self._informers is None else None
        domains = computedomain.Domains(
            client,
            node=s.node_name,
            driver_namespace=s.driver_namespace,
            shared=self._informers,
            watched=watched,
            mark=s.node_mark,
        )
        shared_imex = shared.Shared(
            client,
            node=s.node_name,
            driver_namespace=s.driver_namespace,
            cliques=domains.cliques,
            pods=None if self._informers is None else kube_informers.bound_pods(self._informers),
        )
        facts = edits.NodeFacts(
            clique_id=info.clique_id, channel_major=info.channel_major, caps_major=info.caps_major
        )

        def on_holder_change(holder: str) -> None:
            logger.info("node held by: %s", holder or "none (free)", extra={"node": s.node_name})
            if publisher is not None:
                publisher.poke(delay=s.holder_publish_delay_s)
            if joiner is not None:
                joiner.poke()

        device_state = state.DeviceState(
            node=s.node_name,
            paths=paths,
            retry=s.retry,
            facts=facts,
            domains=domains,
            shared_imex=shared_imex,
            channel_slots=s.channel_slots,
            on_holder_change=on_holder_change,
            on_checkpoint=self.metrics.observe_checkpoint,
        )
        self.device_state = device_state
        await startup.open_checkpoint(
            device_state,
            boot_id,
            quarantine=s.quarantine_corrupt_checkpoint,
            node=s.node_name,
            log=logger,
        )
        publisher = resourceslice.SlicePublisher(
            client,
            node=s.node_name,
            channel_slots=s.channel_slots,
            holder=lambda: device_state.holder,
            shared=self._informers,
        )
        # The Node's labels before the first cleanup and the first prepare: a warm node
        # refuses other CDs' claims, a node in the per-clique scope per-domain ones, and the
        # cleanup's unprepare of a stale claim keeps the folder of the CD the node is warm for
        # (a resident agent's IMEX config, written there as the plugin starts).
        warm = nodewatch.NodeWatch(
            client,
            node=s.node_name,
            on_change=device_state.set_node_labels,
            shared=self._informers,
            on_node=shared_imex.node_seen,
        )
        warm_task = asyncio.create_task(warm.run(), name="node-watch")
        watching = [warm_task]
        if watched is not None:
            watching.append(asyncio.create_task(watched.run(), name="computedomain-watch"))
        try:
            await warm.synced.wait()
            sweeper = cleanup.Cleanup(
                client=client,
                device_state=device_state,
                domains=domains,
                shared_imex=shared_imex,
                settings=s.cleanup,
                node=s.node_name,
            )
            joiner = eager.SharedLabel(
                device_state=device_state,
                shared_imex=shared_imex,
                eager=s.shared_imex_eager,
                clique_id=info.clique_id,
                node=s.node_name,
            )
            async with asyncio.TaskGroup() as tg:
                # Eager: labelled as soon as the node's holder is known (checkpoint and Node
                # read), not after the first cleanup and the gRPC start: the agent's shared IMEX,
                # and so its pod's readiness and an install's wait, no longer waits for the
                # plugin's whole start (issue 28). A stale per-domain claim holds the node until
                # the cleanup releases it; the join waits for that (poked by the change).
                # The clique's registry is followed from here on too (``hold``), so the first
                # per-clique prepare plans and waits from followed state (issue 26).
                background = []
                if joiner.eager:
                    background.append(tasks.spawn(tg, "shared-imex-eager", joiner.run, log=logger))
                    if info.clique_id:
                        hold = functools.partial(shared_imex.hold, info.clique_id)
                        background.append(tasks.spawn(tg, "shared-imex-follow", hold, log=logger))
                await sweeper.run_once()
                await joiner.at_start()
                try:
                    await self._serve_rpcs(client, device_state, publisher, sweeper)
                finally:
                    for task in background:
                        task.cancel()
        finally:
            for task in watching:
                task.cancel()
            for task in watching:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _serve_rpcs(
        self,
        client: AsyncClient,
        device_state: state.DeviceState,
        publisher: resourceslice.SlicePublisher,
        sweeper: cleanup.Cleanup,
    ) -> None:
        s, paths = self._s, self._s.paths
        drv = driver.Driver(
            client=client,
            device_state=device_state,
            node=s.node_name,
            retry=s.retry,
            metrics=self.metrics,
        )
        dra = grpc_server.dra_server(drv)
        self.registration = registration.RegistrationServicer(paths.dra_socket, s.node_name)
        reg = registration.registration_server(self.registration)
        dra_path, reg_path = paths.local(paths.dra_socket), paths.local(paths.registration_socket)
        dra_inode = await grpc_server.listen_unix(dra, dra_path)
        try:
            reg_inode = await grpc_server.listen_unix(reg, reg_path)
            check = health.SelfCheck(reg_path, dra_path)
            try:
                async with asyncio.TaskGroup() as tg:
                    tasks.spawn(tg, "slices", publisher.run, log=logger)
                    tasks.spawn(
                        tg, "cleanup", _after(s.cleanup.interval_s, sweeper.run), log=logger
                    )
                    self._optional_tasks(tg, check)
                    self.ready.set()
                    logger.info("plugin serving", extra={"node": s.node_name})
            finally:
                await check.close()
                await grpc_server.stop_unix(reg, reg_path, reg_inode)
        finally:
            await grpc_server.stop_unix(dra, dra_path, dra_inode)

    def _optional_tasks(self, tg: asyncio.TaskGroup, healthy: health.SelfCheck) -> None:
        s = self._s
        if s.metrics.port is not None:
            self.http = infra_metrics.HttpEndpoint(
                host=s.metrics.bind_address,
                port=s.metrics.port,
                render=self.metrics.render,
                checks={"/healthz": healthy},
            )
            tasks.spawn(tg, "metrics", self.http.run, log=logger)
        if s.health_port is not None:
            port = s.health_port

            async def serve_health() -> None:
                server = health.health_server(healthy)
                server.add_insecure_port(f"{s.metrics.bind_address}:{port}")
                await server.start()
                try:
                    await server.wait_for_termination()
                finally:
                    await server.stop(1.0)

            tasks.spawn(tg, "grpc-health", serve_health, log=logger)


async def _after(delay: float, run: Callable[[], Awaitable[None]]) -> None:
    await asyncio.sleep(delay)
    await run()
