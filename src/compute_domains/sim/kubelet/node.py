"""One simulated GB200 node: the kubelet's API side (Node object, Lease, pods, logs, DRA).

``SimNode.run()`` registers the Node with the labels, capacity and addresses the seeds' GPU
nodes carry (the control-plane node: no GPUs, tainted ``NoSchedule``, its role label set by
an admin through ``mark_control_plane`` as kubeadm does), renews its Lease in
``kube-node-lease`` (so the real node-lifecycle controller sees it alive), watches the pods
bound to it and runs one ``PodWorker`` each. It acts with the
node's own credentials (``system:node:<name>``), so the Node authorizer and NodeRestriction
admission apply as they do to a real kubelet. Cancelling ``run()`` is a node stop: heartbeats
end and every container is killed at once, as when a machine loses power.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.core_v1 import NodeSpec, Taint
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.api import names
from compute_domains.containers import runtime
from compute_domains.infra import kube
from compute_domains.sim import images
from compute_domains.sim.kubelet import config, dra, events, pods, server, services

logger = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
"""kubeadm's role label of a control-plane node (value ``""``); also the key of its taint."""
CONTROL_PLANE_TAINT = Taint(key=CONTROL_PLANE_LABEL, effect="NoSchedule")


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class SimNode:
    """A node's kubelet; ``run()`` serves until cancelled (a node stop)."""

    def __init__(
        self,
        settings: config.NodeSettings,
        client: AsyncClient,
        rt: runtime.Runtime,
        registry: images.ImageRegistry,
        tls: server.TlsFiles,
    ) -> None:
        self._s = settings
        self._client = client
        self._runtime = rt
        self._tls = tls
        self.name = settings.spec.name
        self._workers: dict[str, pods.PodWorker] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._used_slots: set[int] = set()
        self._next_slot = 0
        self.dra = dra.DraManager(
            config.DraSettings(node=self.name, root=settings.root),
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
        )
        self.registered = asyncio.Event()
        self._log = logging.LoggerAdapter(logger, {"node": self.name})

    def labels(self) -> dict[str, str]:
        """The labels a GB200 node of the seeds carries (GPU operator and GFD style); the
        control-plane node has only the kubelet's own (its role label comes from an admin,
        ``mark_control_plane``)."""
        spec = self._s.spec
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if spec.control_plane:
            return labels
        labels |= {
            names.GPU_PRESENT_LABEL: "true",
            "nvidia.com/gpu.count": str(len(spec.gpus)),
            "nvidia.com/gpu.product": "NVIDIA-GB200" if spec.rack is not None else "NVIDIA-H200",
        }
        if spec.rack is not None:
            labels["nvidia.com/gpu.clusteruuid"] = spec.cluster_uuid
            if spec.clique:
                labels["nvidia.com/gpu.clique"] = spec.clique
        return labels

    def _status(self) -> dict[str, Any]:
        gpus = len(self._s.spec.gpus)
        cap = {"cpu": "72", "memory": "480Gi", "pods": "110", "ephemeral-storage": "1Ti"}
        if gpus:
            cap[GPU_RESOURCE] = str(gpus)
        now = _stamp()
        return {
            "capacity": cap,
            "allocatable": cap,
            "addresses": [
                {"type": "InternalIP", "address": self._s.spec.address},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self._s.kubelet_port}},
            "conditions": [
                {
                    "type": t,
                    "status": "False",
                    "reason": r,
                    "message": m,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
                for t, r, m in (
                    ("MemoryPressure", "KubeletHasSufficientMemory", "ok"),
                    ("DiskPressure", "KubeletHasNoDiskPressure", "ok"),
                    ("PIDPressure", "KubeletHasSufficientPID", "ok"),
                )
            ]
            + [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "simulated kubelet is posting ready status",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.34.4-sim",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "sim://1",
                "osImage": "simulated control plane" if gpus == 0 else "simulated GB200",
                "kernelVersion": "sim",
                "machineID": self.name,
                "systemUUID": self.name,
                "bootID": self.dra.boot_id(),
            },
        }

    async def _register(self) -> None:
        delay = 0.5
        while True:
            try:
                await self._register_once()
                return
            except (OSError, httpx.HTTPError) as err:
                self._log.warning("registration failed (%s); retrying in %.1fs", err, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)

    async def _register_once(self) -> None:
        # Taints are set at registration (``--register-with-taints``): NodeRestriction lets a
        # kubelet create its Node with taints but never change them afterwards.
        taints = [CONTROL_PLANE_TAINT] if self._s.spec.control_plane else None
        node = Node(
            metadata=ObjectMeta(name=self.name, labels=self.labels()),
            spec=NodeSpec(taints=taints),
        )
        try:
            with kube.translated(f"create node {self.name}"):
                await self._client.create(node)
        except kube.AlreadyExists:
            await self._client.patch(Node, self.name, {"metadata": {"labels": self.labels()}})
        await self._client.patch(Node.Status, self.name, {"status": self._status()})
        self.registered.set()
        self._log.info("registered")

    async def _lease_loop(self) -> None:
        ns, renew = "kube-node-lease", self._s.lease_renew_s
        lease = Lease(
            metadata=ObjectMeta(name=self.name, namespace=ns),
            spec=LeaseSpec(
                holderIdentity=self.name,
                leaseDurationSeconds=max(int(renew * 4), 10),
                renewTime=datetime.datetime.now(datetime.UTC),
            ),
        )
        with contextlib.suppress(kube.KubeError), kube.translated("create lease"):
            await self._client.create(lease)
        last_status = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(renew)
            try:
                await self._client.patch(
                    Lease,
                    self.name,
                    {"spec": {"renewTime": _stamp(), "holderIdentity": self.name}},
                    namespace=ns,
                )
                now = asyncio.get_running_loop().time()
                if now - last_status >= self._s.status_update_s:
                    conditions = self._status()["conditions"]
                    await self._client.patch(
                        Node.Status, self.name, {"status": {"conditions": conditions}}
                    )
                    last_status = now
            except httpx.HTTPError as err:
                self._log.warning("heartbeat failed: %s", kube.server_message(err))

    def _allocate_ip(self, pod: Pod) -> str:
        if pod.spec is not None and pod.spec.hostNetwork:
            return self._s.spec.address
        for step in range(253):
            slot = (self._next_slot + step) % 253
            if slot not in self._used_slots:
                self._used_slots.add(slot)
                # Rotate, so a re-created pod gets a new address (as with a CNI's IPAM).
                self._next_slot = (slot + 1) % 253
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

    async def _pod_watch(self) -> None:
        fields: dict[str, Any] = {"spec.nodeName": self.name}
        while True:
            try:
                async for op, pod in self._client.watch(Pod, namespace="*", fields=fields):
                    self._on_pod(op, pod)
            except httpx.HTTPError as err:
                self._log.warning("pod watch ended: %s; restarting", kube.server_message(err))
                await asyncio.sleep(1)

    def worker(self, namespace: str, name: str) -> pods.PodWorker | None:
        """The worker of a pod on this node (for logs and exec)."""
        for w in self._workers.values():
            if (w.namespace, w.name) == (namespace, name):
                return w
        return None

    async def run(self) -> None:
        """Register, then serve heartbeats, pods, DRA and logs until cancelled."""
        await self._register()
        logs = server.KubeletApi(
            self._s.spec.address, self._s.kubelet_port, self._tls, self.worker, self._runtime
        )
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._lease_loop(), name=f"lease:{self.name}")
                tg.create_task(self.dra.run(), name=f"dra:{self.name}")
                tg.create_task(logs.run(), name=f"kubelet-api:{self.name}")
                tg.create_task(self._pod_watch(), name=f"pods:{self.name}")
        finally:
            # A stop is a power cut: cancelled workers SIGKILL their containers and make no
            # API call (no status, no unprepare, no delete).
            tasks = list(self._tasks.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def mark_control_plane(admin: AsyncClient, name: str) -> None:
    """Give the control-plane node its role label, as ``kubeadm init`` does with admin
    credentials: NodeRestriction forbids a kubelet to set ``node-role.kubernetes.io/*``."""
    await admin.patch(Node, name, {"metadata": {"labels": {CONTROL_PLANE_LABEL: ""}}})
