"""A simulated node's Node object and heartbeats, as the kubelet keeps them.

``register`` creates the Node with the labels, capacity and addresses the seeds' GPU nodes
carry (the control-plane node: no GPUs, tainted ``NoSchedule`` at registration as with
``--register-with-taints``; its role label is set by an admin through ``mark_control_plane``,
as kubeadm does, since NodeRestriction forbids a kubelet to set it), retrying with back-off
until the API server answers. ``heartbeat`` renews the node's Lease in ``kube-node-lease``
(so the real node-lifecycle controller sees it alive) and refreshes the conditions'
heartbeat, at the intervals of ``config.KubeletSettings``. The status carries the node's boot
id, which a reboot changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from pathlib import Path
from typing import Any, cast

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.core_v1 import Taint
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node

from compute_domains.api import names
from compute_domains.infra import kube
from compute_domains.sim.kubelet import config

GPU_RESOURCE = "nvidia.com/gpu"
CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
"""kubeadm's role label of a control-plane node (value ``""``); also the key of its taint."""
CONTROL_PLANE_TAINT = Taint(key=CONTROL_PLANE_LABEL, effect="NoSchedule")


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def boot_id(root: Path) -> str:
    """The node's current boot id (empty before the agent wrote one)."""
    path = root / "proc/sys/kernel/random/boot_id"
    return path.read_text().strip() if path.exists() else ""


class NodeStatus:
    """The Node object and Lease of one node; ``registered`` is set once the Node exists."""

    def __init__(
        self,
        settings: config.NodeSettings,
        client: AsyncClient,
        log: logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self._s = settings
        self._client = client
        self._log = log
        self.name = settings.spec.name
        self.registered = asyncio.Event()

    def labels(self) -> dict[str, str]:
        """The labels a GB200 node of the seeds carries (GPU operator and GFD style); the
        control-plane node has only the kubelet's own (its role label comes from an admin,
        ``mark_control_plane``)."""
        spec = self._s.spec
        # The kubelet's own (its ``initialNode``), the beta OS and arch labels included: without
        # them kube-controller-manager's node-lifecycle controller patches every Node once to add
        # them, a Node label update that makes kube-scheduler re-queue every parked pod (at 4,608
        # nodes those patches lagged into the formation: 295,509 re-queues).
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
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
                "bootID": boot_id(self._s.root),
            },
        }

    async def register(self) -> None:
        """Create (or update) the Node and its status; retried until the server answers."""
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
        # With its status, as the kubelet's initial Node: one write, and the node-lifecycle
        # controller never sees a Node without a Ready condition (which it would taint).
        node = cast(
            Node,
            Node.from_dict(
                {
                    "metadata": {"name": self.name, "labels": self.labels()},
                    "spec": {"taints": [t.to_dict() for t in taints]} if taints else {},
                    "status": self._status(),
                }
            ),
        )
        try:
            with kube.translated(f"create node {self.name}"):
                created = await self._client.create(node)
        except kube.AlreadyExists:
            created = None
        if created is None or not _has_ready(created):
            if created is None:
                await self._client.patch(Node, self.name, {"metadata": {"labels": self.labels()}})
            await self._client.patch(Node.Status, self.name, {"status": self._status()})
        self.registered.set()
        self._log.info("registered")

    async def heartbeat(self) -> None:
        """Renew the Lease and refresh the conditions until cancelled."""
        ns, renew = "kube-node-lease", self._s.kubelet.lease_renew_s
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
                if now - last_status >= self._s.kubelet.status_update_s:
                    conditions = self._status()["conditions"]
                    await self._client.patch(
                        Node.Status, self.name, {"status": {"conditions": conditions}}
                    )
                    last_status = now
            except httpx.HTTPError as err:
                self._log.warning("heartbeat failed: %s", kube.server_message(err))


def _has_ready(node: Node) -> bool:
    """Whether the API server kept the Ready condition the Node was created with."""
    return node.status is not None and any(c.type == "Ready" for c in node.status.conditions or [])


async def mark_control_plane(admin: AsyncClient, name: str) -> None:
    """Give the control-plane node its role label, as ``kubeadm init`` does with admin
    credentials: NodeRestriction forbids a kubelet to set ``node-role.kubernetes.io/*``."""
    await admin.patch(Node, name, {"metadata": {"labels": {CONTROL_PLANE_LABEL: ""}}})
