"""DRANET's kubelet plugin on one simulated node: registration and ``DRAPlugin`` over unix sockets.

The same protocol the kubelet speaks with any DRA driver (kubelet's plugin watcher, then
``NodePrepareResources``/``NodeUnprepareResources`` v1 or v1beta1), on the paths DRANET's
kubelet-plugin helper uses: ``plugins_registry/dra.net-reg.sock`` and
``plugins/dra.net/dra.sock`` under the node root. One gRPC server carries both sockets.

Prepare is DRANET v1.3.0's ``prepareResourceClaim``, as the kubelet-plugin helper calls it:
the claim is read from the API (an error names it: not found, not allocated, replaced); the pods
in its ``reservedFor`` are its users; each allocated device of driver ``dra.net`` is looked up in
the node's inventory and recorded in the pod config store for the runtime hooks (``nri``). The
answer lists no devices and no CDI ids: DRANET gives containers their devices through NRI, not
CDI. Unprepare forgets the claim. Opaque configs of ``dra.net`` (interface renames, routes,
ethtool...) are refused with a clear error: the stand-in applies none of them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains._proto.dra.v1 import api_pb2 as v1
from compute_domains._proto.dra.v1 import api_pb2_grpc as v1_grpc
from compute_domains._proto.dra.v1beta1 import api_pb2 as v1beta1
from compute_domains._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from compute_domains._proto.pluginregistration.v1 import api_pb2 as reg
from compute_domains._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from compute_domains.infra import grpcwake, kube
from compute_domains.sim.dranet import inventory, podconfig

logger = logging.getLogger(__name__)

REGISTRATION_SOCKET = "var/lib/kubelet/plugins_registry/dra.net-reg.sock"
DRA_SOCKET = "var/lib/kubelet/plugins/dra.net/dra.sock"


ClaimGetter = Callable[[str, str], Awaitable[dict[str, Any]]]
"""(namespace, name) → the ResourceClaim as JSON; raises ``kube.KubeError``."""


def claim_getter(client: AsyncClient) -> ClaimGetter:
    """Read claims from the API with ``client`` (as the kubelet-plugin helper does)."""

    async def get(namespace: str, name: str) -> dict[str, Any]:
        with kube.translated(f"retrieve claim {namespace}/{name}"):
            raw = await kube.get_raw(client, ResourceClaim, name, namespace=namespace)
        claim: dict[str, Any] = json.loads(raw)
        return claim

    return get


class Prepare:
    """DRANET's prepare and unprepare for one node, over its inventory and pod config store."""

    def __init__(
        self,
        get_claim: ClaimGetter,
        node: str,
        nics: list[inventory.Nic],
        store: podconfig.PodConfigStore,
    ) -> None:
        self._get_claim = get_claim
        self._node = node
        self._nics = {n.device_name: n for n in nics}
        self.store = store

    async def _claim(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        """The claim as the helper checks it; ValueError with its message when unusable."""
        try:
            claim = await self._get_claim(namespace, name)
        except kube.KubeError as err:
            raise ValueError(f"retrieve claim {namespace}/{name}: {err}") from err
        if claim.get("metadata", {}).get("uid") != uid:
            raise ValueError(f"claim {namespace}/{name} got replaced")
        if not claim.get("status", {}).get("allocation"):
            raise ValueError(f"claim {namespace}/{name} not allocated")
        return claim

    async def prepare(self, namespace: str, name: str, uid: str) -> str:
        """Prepare one claim; the error text ("" when prepared)."""
        try:
            claim = await self._claim(namespace, name, uid)
        except ValueError as err:
            return str(err)
        status = claim.get("status", {})
        pods = [
            r["uid"]
            for r in status.get("reservedFor") or []
            if r.get("resource") == "pods" and not r.get("apiGroup")
        ]
        if not pods:
            logger.info(
                "no pods allocated to claim %s/%s", namespace, name, extra={"node": self._node}
            )
            return ""
        devices = status["allocation"].get("devices", {})
        problems: list[str] = []
        for cfg in devices.get("config") or []:
            if (cfg.get("opaque") or {}).get("driver") == inventory.DRIVER:
                problems.append(
                    "opaque dra.net configuration is not applied by the simulator's DRANET "
                    "stand-in (docs/simulator.md)"
                )
        configs: list[podconfig.DeviceConfig] = []
        for result in devices.get("results") or []:
            if result.get("driver") != inventory.DRIVER:
                continue  # another driver's device of the same claim
            nic = self._nics.get(result.get("device", ""))
            if nic is None:
                d = result.get("device", "")
                problems.append(
                    f"failed to get network interface name for device {d}: device {d} not "
                    "found in store"
                )
                continue
            chars = inventory.char_devices(nic)
            configs.append(
                podconfig.DeviceConfig(
                    claim=f"{namespace}/{name}",
                    device=nic.device_name,
                    if_name=nic.if_name,
                    mac=nic.mac,
                    addresses=(nic.ipv4,),
                    rdma_link=nic.rdma_link,
                    char_devices=tuple((p, ma, mi) for p, (ma, mi) in sorted(chars.items())),
                )
            )
        if problems:
            return f"claim {uid} contain errors: " + "\n".join(problems)
        for cfg in configs:
            for pod in pods:
                self.store.set(pod, cfg)
        logger.info(
            "prepared claim %s/%s: %s for pods %s",
            namespace,
            name,
            ", ".join(c.if_name for c in configs),
            ", ".join(pods),
            extra={"node": self._node},
        )
        return ""

    def unprepare(self, namespace: str, name: str) -> str:
        """Unprepare one claim (never fails)."""
        self.store.delete_claim(f"{namespace}/{name}")
        return ""


class _Registration(reg_grpc.RegistrationServicer):
    async def GetInfo(self, request: reg.InfoRequest, context: Any) -> reg.PluginInfo:
        return reg.PluginInfo(
            type="DRAPlugin",
            name=inventory.DRIVER,
            endpoint="/" + DRA_SOCKET,
            supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
        )

    async def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: Any
    ) -> reg.RegistrationStatusResponse:
        if not request.plugin_registered:
            logger.error("the kubelet refused the registration: %s", request.error)
        return reg.RegistrationStatusResponse()


class _Dra(v1_grpc.DRAPluginServicer):
    def __init__(self, prep: Prepare) -> None:
        self._prep = prep

    async def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: Any
    ) -> v1.NodePrepareResourcesResponse:
        response = v1.NodePrepareResourcesResponse()
        for c in request.claims:
            error = await self._prep.prepare(c.namespace, c.name, c.uid)
            entry = response.claims[c.uid]
            if error:
                entry.error = error
        return response

    async def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: Any
    ) -> v1.NodeUnprepareResourcesResponse:
        response = v1.NodeUnprepareResourcesResponse()
        for c in request.claims:
            response.claims[c.uid].error = self._prep.unprepare(c.namespace, c.name)
        return response


class _DraV1beta1(v1beta1_grpc.DRAPluginServicer):
    """v1beta1 carries the same messages: convert through the wire format."""

    def __init__(self, current: _Dra) -> None:
        self._v1 = current

    async def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: Any
    ) -> v1beta1.NodePrepareResourcesResponse:
        req = v1.NodePrepareResourcesRequest.FromString(request.SerializeToString())
        reply = await self._v1.NodePrepareResources(req, context)
        return v1beta1.NodePrepareResourcesResponse.FromString(reply.SerializeToString())

    async def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: Any
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        req = v1.NodeUnprepareResourcesRequest.FromString(request.SerializeToString())
        reply = await self._v1.NodeUnprepareResources(req, context)
        return v1beta1.NodeUnprepareResourcesResponse.FromString(reply.SerializeToString())


class PluginServer:
    """The node's plugin sockets; ``start`` listens (registration last), ``stop`` removes them."""

    def __init__(self, node_root: Path, prep: Prepare) -> None:
        self._root = node_root
        self._server = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(_Registration(), self._server)
        current = _Dra(prep)
        v1_grpc.add_DRAPluginServicer_to_server(current, self._server)
        v1beta1_grpc.add_DRAPluginServicer_to_server(_DraV1beta1(current), self._server)

    async def start(self) -> None:
        """Listen on both sockets (a stale socket file from an earlier run is replaced).

        Raises:
            OSError: a socket cannot be created.
        """
        # The DRA socket first, so the endpoint answers once the kubelet finds the registration.
        for rel in (DRA_SOCKET, REGISTRATION_SOCKET):
            path = self._root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
            if len(str(path).encode()) >= 108:
                raise OSError(f"unix socket path too long (max 107 bytes): {path}")
            if self._server.add_insecure_port(f"unix:{path}") == 0:
                raise OSError(f"cannot listen on unix socket {path}")
        await self._server.start()
        grpcwake.unthrottle()

    async def stop(self) -> None:
        """Stop serving and remove the socket files (the kubelet deregisters the driver)."""
        await self._server.stop(1.0)
        for rel in (REGISTRATION_SOCKET, DRA_SOCKET):
            (self._root / rel).unlink(missing_ok=True)
