"""DRANET's runtime hooks on one simulated node (it is an NRI plugin of the container runtime).

What DRANET v1.3.0 does, and its stand-in here (the node's network views, ``kubelet.nri``):

- ``RunPodSandbox``: a pod with host networking that claimed devices is refused ("... using host
  network can not claim host devices"). Otherwise each prepared netdev moves from the host into
  the pod's network namespace (here: its ``sys/class/net/<ifName>`` folder moves from the node's
  view into the pod's), keeping its name and addresses; then the claim's ``status.devices`` gets,
  per device, the conditions ``Ready`` (``NetworkDeviceReady``) and ``NetworkReady`` and the
  ``networkData`` (interface name, MAC, IPs), written by server-side apply as field manager
  ``dra.net`` without holding up the sandbox. The RDMA link (``mlx5_N``) stays in the host
  namespace: RDMA's default netns mode is ``shared``.
- ``CreateContainer``: each container gets the RDMA character devices of the pod's NICs
  (``/dev/infiniband/rdma_cm``, ``uverbs<N>``), nothing else: no env, no mounts.
- ``StopPodSandbox``: the netdevs go back to the host.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from compute_domains.containers import runtime
from compute_domains.infra import kube
from compute_domains.sim.dranet import inventory, podconfig
from compute_domains.sim.kubelet import nri

logger = logging.getLogger(__name__)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _device_status(node: str, cfg: podconfig.DeviceConfig) -> dict[str, Any]:
    now = _now()
    return {
        "driver": inventory.DRIVER,
        "pool": node,
        "device": cfg.device,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "NetworkDeviceReady",
                "message": "",
                "lastTransitionTime": now,
            },
            {
                "type": "NetworkReady",
                "status": "True",
                "reason": "NetworkReady",
                "message": "",
                "lastTransitionTime": now,
            },
        ],
        "networkData": {
            "interfaceName": cfg.if_name,
            "hardwareAddress": cfg.mac,
            "ips": list(cfg.addresses),
        },
    }


StatusWriter = Callable[[str, list[dict[str, Any]]], Awaitable[None]]
"""(``namespace/name`` of a claim, its ``status.devices``) → written; raises ``kube.KubeError``."""


def status_writer(client: AsyncClient) -> StatusWriter:
    """Write claims' device status with ``client``: server-side apply, field manager
    ``dra.net``, forced (DRANET's ``ApplyStatus``)."""

    async def write(claim: str, devices: list[dict[str, Any]]) -> None:
        namespace, name = claim.split("/", 1)
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"devices": devices},
        }
        with kube.translated(f"update status of claim {claim}"):
            await client.patch(
                ResourceClaim.Status,
                name,
                body,
                namespace=namespace,
                patch_type=PatchType.APPLY,
                field_manager=inventory.DRIVER,
                force=True,
            )

    return write


class NriHooks:
    """``kubelet.nri.Plugin`` of one node."""

    name = "dranet"

    def __init__(
        self,
        write_status: StatusWriter,
        node: str,
        node_root: Path,
        store: podconfig.PodConfigStore,
    ) -> None:
        self._write_status = write_status
        self._node = node
        self._root = node_root
        self._store = store
        self._pending: set[asyncio.Task[None]] = set()

    def _host_net(self) -> Path:
        return self._root / "sys/class/net"

    async def run_pod_sandbox(self, sandbox: nri.Sandbox) -> None:
        """Move the pod's netdevs into its network view; publish the claims' device status."""
        configs = self._store.pod(sandbox.uid)
        if not configs:
            return
        if sandbox.netns is None:
            raise nri.NriError(
                f"RunPodSandbox pod {sandbox.namespace}/{sandbox.name} using host network can "
                "not claim host devices"
            )
        netns = sandbox.netns
        for cfg in configs:
            if not cfg.if_name:
                continue
            try:
                await asyncio.to_thread(self._move, cfg.if_name, self._host_net(), netns)
            except OSError as err:
                raise nri.NriError(
                    f"error moving network device {cfg.device} to namespace {netns}: {err}"
                ) from err
        by_claim: dict[str, list[dict[str, Any]]] = {}
        for cfg in configs:
            by_claim.setdefault(cfg.claim, []).append(_device_status(self._node, cfg))
        for claim, devices in by_claim.items():
            # As DRANET: the status write does not hold up the sandbox.
            task = asyncio.create_task(
                self._apply_status(claim, devices), name=f"dranet-status:{claim}"
            )
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        logger.info(
            "moved %s into pod %s/%s",
            ", ".join(c.if_name for c in configs),
            sandbox.namespace,
            sandbox.name,
            extra={"node": self._node},
        )

    @staticmethod
    def _move(if_name: str, source: Path, target: Path) -> None:
        if (target / if_name).exists():
            return  # a retried sandbox start: already moved
        target.mkdir(parents=True, exist_ok=True)
        os.rename(source / if_name, target / if_name)

    async def _apply_status(self, claim: str, devices: list[dict[str, Any]]) -> None:
        try:
            await self._write_status(claim, devices)
        except kube.KubeError as err:
            # DRANET logs it and goes on: the status is informational.
            logger.info(
                "failed to update status for claim %s: %s", claim, err, extra={"node": self._node}
            )

    async def create_container(self, sandbox: nri.Sandbox, container: str) -> nri.Adjustment:
        """The RDMA character devices of the pod's NICs, each once."""
        seen: dict[str, runtime.DeviceNode] = {}
        for cfg in self._store.pod(sandbox.uid):
            for path, major, minor in cfg.char_devices:
                seen.setdefault(path, runtime.DeviceNode(path=path, major=major, minor=minor))
        return nri.Adjustment(devices=list(seen.values()))

    async def stop_pod_sandbox(self, sandbox: nri.Sandbox) -> None:
        """Return the pod's netdevs to the host."""
        if sandbox.netns is None:
            return
        for cfg in self._store.pod(sandbox.uid):
            if not cfg.if_name:
                continue
            try:
                await asyncio.to_thread(self._return, cfg.if_name, sandbox.netns, self._host_net())
            except OSError as err:
                logger.error(
                    "fail to return network device %s : %s",
                    cfg.device,
                    err,
                    extra={"node": self._node},
                )

    @staticmethod
    def _return(if_name: str, netns: Path, host: Path) -> None:
        if not (netns / if_name).exists():
            return
        host.mkdir(parents=True, exist_ok=True)
        os.rename(netns / if_name, host / if_name)

    async def close(self) -> None:
        """Wait for status writes in flight."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
