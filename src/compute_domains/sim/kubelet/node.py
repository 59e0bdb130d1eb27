"""One simulated GB200 node's kubelet: its Node, its pods, its DRA manager and its endpoint.

``SimNode.run()`` registers the Node (``nodestatus``), then runs side by side the Lease
heartbeat, the DRA manager (``dra``), the kubelet's HTTPS endpoint (``server``) and a watch of
the pods bound to the node, with one ``pods.PodWorker`` per pod; a pod found terminating that
no worker runs (deleted while the kubelet was down) has its claims unprepared and its deletion
finished. Pod addresses come from the node's range, rotating as a CNI's IPAM does. The node acts
with its own credentials (``system:node:<name>``), so the Node authorizer and NodeRestriction
admission apply as they do to a real kubelet. Cancelling ``run()`` is a node stop: heartbeats
end and every container is killed at once, as when a machine loses power.

On a node host (virtual nodes) the pods come from the host's one cache of bound pods
(``infra.kube.informers.bound_pods``), routed to this node by its ``spec.nodeName`` index:
kwok's one pod watch for every simulated node; a re-list there reports what changed meanwhile.
Without it (process mode) the node opens its own watch, as a kubelet does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.containers import runtime
from compute_domains.infra import kube
from compute_domains.infra.kube import informers
from compute_domains.sim import images
from compute_domains.sim.kubelet import (
    config,
    dra,
    events,
    nodestatus,
    nri,
    pods,
    server,
    services,
)

logger = logging.getLogger(__name__)


class SimNode:
    """A node's kubelet; ``run()`` serves until cancelled (a node stop)."""

    def __init__(
        self,
        settings: config.NodeSettings,
        client: AsyncClient,
        rt: runtime.Runtime,
        registry: images.ImageRegistry,
        tls: server.TlsFiles,
        shared: informers.Informers | None = None,
        nri_plugins: Sequence[nri.Plugin] = (),
    ) -> None:
        """``nri_plugins``: the runtime's NRI plugins (DRANET's stand-in), in call order."""
        self._s = settings
        self._shared = shared
        self._client = client
        self._runtime = rt
        self._tls = tls
        self.name = settings.spec.name
        self._workers: dict[str, pods.PodWorker] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._used_slots: set[int] = set()
        self._next_slot = 0
        dra_settings = config.DraSettings(node=self.name, root=settings.root)
        self._sweep_s = dra_settings.reconcile_s
        self.dra = dra.DraManager(
            dra_settings,
            client,
            active_pods=lambda: set(self._workers),
        )
        self.services = services.NodeServices(
            name=self.name,
            ip=settings.spec.address,
            root=settings.root,
            client=client,
            runtime=rt,
            recorder=events.EventRecorder(client, self.name),
            images=registry,
            settings=settings.kubelet,
            api_host=settings.api_host,
            api_port=settings.api_port,
            prepare=self.dra.prepare,
            unprepare=self.dra.unprepare,
            resolve_cdi=self.dra.resolve_cdi,
            release_ip=self._release_ip,
            logs_dir=settings.root / "var/log/pods",
            nri_plugins=tuple(nri_plugins),
        )
        self._log = logging.LoggerAdapter(logger, {"node": self.name})
        self._status = nodestatus.NodeStatus(settings, client, self._log)
        self.registered = self._status.registered
        """Set once the Node object exists."""

    def _allocate_ip(self, pod: Pod) -> str:
        if pod.spec is not None and pod.spec.hostNetwork:
            return self._s.spec.address
        slots = self._s.spec.pod_slots
        for step in range(slots):
            slot = (self._next_slot + step) % slots
            if slot not in self._used_slots:
                self._used_slots.add(slot)
                # Rotate, so a re-created pod gets a new address (as with a CNI's IPAM).
                self._next_slot = (slot + 1) % slots
                return self._s.spec.pod_address(slot)
        raise RuntimeError(f"node {self.name} ran out of pod addresses")

    def _release_ip(self, ip: str) -> None:
        if ip == self._s.spec.address:
            return
        self._used_slots.discard(int(ip.rsplit(".", 1)[1]) - 2)

    def _on_pod(self, op: str, pod: Pod) -> None:
        meta = pod.metadata
        assert meta is not None and meta.uid
        worker = self._workers.get(meta.uid)
        if op == "DELETED":
            if worker is not None:
                worker.terminate(0, gone=True)
            return
        if worker is None:
            if meta.uid in self._tasks:
                return  # already being finished
            if meta.deletionTimestamp is not None:
                # Terminating while this kubelet was down: nothing runs, finish the deletion.
                self._tasks[meta.uid] = asyncio.create_task(
                    self._finish_terminating(pod), name=f"finish:{meta.name}"
                )
                return
            if pod.status is not None and pod.status.phase in ("Succeeded", "Failed"):
                return
            worker = pods.PodWorker(self.services, pod, self._allocate_ip(pod))
            self._workers[meta.uid] = worker
            self._tasks[meta.uid] = asyncio.create_task(
                self._run_worker(worker), name=f"pod:{meta.name}"
            )
            return
        worker.update(pod)
        if meta.deletionTimestamp is not None:
            worker.terminate(float(meta.deletionGracePeriodSeconds or 0))

    async def _finish_terminating(self, pod: Pod) -> None:
        meta = pod.metadata
        assert meta is not None and meta.uid and meta.name
        try:
            with kube.translated(f"finish deleting pod {meta.name}"):
                await self.dra.unprepare(pod)
                await self._client.delete(Pod, meta.name, namespace=meta.namespace, grace_period=0)
        except kube.NotFound:
            pass  # already gone
        except kube.KubeError as err:
            self._log.warning(
                "could not finish deleting pod %s: %s", meta.name, kube.server_message(err)
            )
        finally:
            self._tasks.pop(meta.uid, None)

    async def _run_worker(self, worker: pods.PodWorker) -> None:
        try:
            await worker.run()
        except Exception:
            self._log.exception("pod %s/%s failed", worker.namespace, worker.name)
        finally:
            self._workers.pop(worker.uid, None)
            self._tasks.pop(worker.uid, None)

    async def _shared_pods(self, shared: informers.Informers) -> None:
        pods_cache = informers.bound_pods(shared)

        def changed(old: Pod | None, new: Pod | None) -> None:
            if new is None:
                if old is not None:
                    self._on_pod("DELETED", old)
            elif (new.spec.nodeName if new.spec else None) == self.name:
                self._on_pod("ADDED" if old is None else "MODIFIED", new)

        unsubscribe = pods_cache.subscribe(changed, index=informers.NODE_INDEX, value=self.name)
        try:
            await pods_cache.synced.wait()
            for pod in pods_cache.by_index(informers.NODE_INDEX, self.name):
                self._on_pod("ADDED", pod)
            await asyncio.Event().wait()  # later changes arrive through ``changed``
        finally:
            unsubscribe()

    async def _pod_watch(self) -> None:
        if self._shared is not None:
            await self._shared_pods(self._shared)
            return
        fields: dict[str, Any] = {"spec.nodeName": self.name}
        while True:
            try:
                async for op, pod in self._client.watch(Pod, namespace="*", fields=fields):
                    self._on_pod(op, pod)
            except httpx.HTTPError as err:
                self._log.warning("pod watch ended: %s; restarting", kube.server_message(err))
                await asyncio.sleep(1)

    async def _sweep_sandboxes(self) -> None:
        """The runtime's cleanup of sandboxes no pod worker owns: a pod deleted while the node
        was down (force-deleted after a power cut) leaves its network view, holding the NICs an
        NRI plugin moved into it. Each such sandbox is stopped (the plugins' StopPodSandbox) and
        its view removed, which returns its netdevs to the host. The first pass waits a period,
        as the DRA sweep does, so that pods still bound here have their workers again."""
        netns = self._s.root / nri.NETNS_DIR
        while True:
            await asyncio.sleep(self._sweep_s)
            views = await asyncio.to_thread(
                lambda: {p.name for p in netns.iterdir()} if netns.is_dir() else set()
            )
            for uid in sorted(views - set(self._workers)):
                sandbox = nri.Sandbox(uid=uid, namespace="", name="", ip="", netns=netns / uid)
                for plugin in self.services.nri_plugins:
                    try:
                        await plugin.stop_pod_sandbox(sandbox)
                    except nri.NriError as err:
                        self._log.warning(
                            "NRI plugin %s failed StopPodSandbox: %s", plugin.name, err
                        )
                await asyncio.to_thread(nri.remove_netns, self._s.root, uid)
                self._log.info("removed the sandbox of vanished pod %s", uid)

    def worker(self, namespace: str, name: str) -> pods.PodWorker | None:
        """The worker of a pod on this node (for logs and exec)."""
        for w in self._workers.values():
            if (w.namespace, w.name) == (namespace, name):
                return w
        return None

    async def run(self) -> None:
        """Register, then serve heartbeats, pods, DRA and logs until cancelled."""
        await self._status.register()
        logs = server.KubeletApi(
            self._s.spec.address, self._s.kubelet_port, self._tls, self.worker, self._runtime
        )
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._status.heartbeat(), name=f"lease:{self.name}")
                tg.create_task(self.dra.run(), name=f"dra:{self.name}")
                tg.create_task(logs.run(), name=f"kubelet-api:{self.name}")
                tg.create_task(self._pod_watch(), name=f"pods:{self.name}")
                if self.services.nri_plugins:
                    tg.create_task(self._sweep_sandboxes(), name=f"sandboxes:{self.name}")
        finally:
            # A stop is a power cut: cancelled workers SIGKILL their containers and make no
            # API call (no status, no unprepare, no delete).
            tasks = list(self._tasks.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
