"""The DRA gRPC service (``v1`` and ``v1beta1`` DRAPlugin) on the plugin's unix socket.

Both versions carry byte-identical messages (kubelet contract §1.2); the ``v1beta1`` servicer
converts its request to ``v1`` and the reply back through the wire format, exactly what the
kubelet's own conversion amounts to, so one implementation serves both. Every claim in a
request gets an entry in the reply; failures travel as per-claim ``error`` strings and the RPC
itself always succeeds. No lock is held across RPCs: concurrent calls run concurrently.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

import grpc

from compute_domains._proto.dra.v1 import api_pb2 as v1
from compute_domains._proto.dra.v1 import api_pb2_grpc as v1_grpc
from compute_domains._proto.dra.v1beta1 import api_pb2 as v1beta1
from compute_domains._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from compute_domains.infra import grpcwake
from compute_domains.plugin import driver

logger = logging.getLogger(__name__)


def _refs(claims: Any) -> list[driver.ClaimRef]:
    return [driver.ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


class DraServicer(v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

    def __init__(self, drv: driver.Driver) -> None:
        self._driver = drv

    async def NodePrepareResources(
        self, request: v1.NodePrepareResourcesRequest, context: Any
    ) -> v1.NodePrepareResourcesResponse:
        """Prepare each claim; one result per claim UID."""
        results = await self._driver.prepare(_refs(request.claims))
        response = v1.NodePrepareResourcesResponse()
        for uid, result in results.items():
            entry = response.claims[uid]
            if result.error:
                entry.error = result.error
                continue
            for d in result.devices:
                entry.devices.add(
                    request_names=list(d.request_names),
                    pool_name=d.pool_name,
                    device_name=d.device_name,
                    cdi_device_ids=list(d.cdi_device_ids),
                )
        return response

    async def NodeUnprepareResources(
        self, request: v1.NodeUnprepareResourcesRequest, context: Any
    ) -> v1.NodeUnprepareResourcesResponse:
        """Unprepare each claim; one result per claim UID."""
        results = await self._driver.unprepare(_refs(request.claims))
        response = v1.NodeUnprepareResourcesResponse()
        for uid, error in results.items():
            response.claims[uid].error = error
        return response


class DraServicerV1beta1(v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``, delegating to the v1 servicer."""

    def __init__(self, current: DraServicer) -> None:
        self._v1 = current

    async def NodePrepareResources(
        self, request: v1beta1.NodePrepareResourcesRequest, context: Any
    ) -> v1beta1.NodePrepareResourcesResponse:
        """Same as v1."""
        converted = v1.NodePrepareResourcesRequest.FromString(request.SerializeToString())
        reply = await self._v1.NodePrepareResources(converted, context)
        return v1beta1.NodePrepareResourcesResponse.FromString(reply.SerializeToString())

    async def NodeUnprepareResources(
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: Any
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        """Same as v1."""
        converted = v1.NodeUnprepareResourcesRequest.FromString(request.SerializeToString())
        reply = await self._v1.NodeUnprepareResources(converted, context)
        return v1beta1.NodeUnprepareResourcesResponse.FromString(reply.SerializeToString())


def dra_server(drv: driver.Driver) -> grpc.aio.Server:
    """A gRPC server carrying both DRA service versions (not yet listening)."""
    server = grpc.aio.server()
    current = DraServicer(drv)
    v1_grpc.add_DRAPluginServicer_to_server(current, server)
    v1beta1_grpc.add_DRAPluginServicer_to_server(DraServicerV1beta1(current), server)
    return server


async def listen_unix(server: grpc.aio.Server, path: Path) -> int:
    """Start ``server`` on unix socket ``path``, replacing a stale socket file.

    Returns:
        The socket file's inode, for ``stop_unix``.

    Raises:
        OSError: the socket cannot be created (folder missing and not creatable, path too long).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    if len(str(path).encode()) >= 108:
        raise OSError(f"unix socket path too long (max 107 bytes): {path}")
    if server.add_insecure_port(f"unix:{path}") == 0:
        raise OSError(f"cannot listen on unix socket {path}")
    await server.start()
    # Many plugins in one process (a node host) complete more gRPC calls than its loop iterates.
    grpcwake.unthrottle()
    logger.info("serving gRPC on %s", path)
    return path.stat().st_ino


async def stop_unix(server: grpc.aio.Server, path: Path, inode: int, grace: float = 5.0) -> None:
    """Stop ``server`` (in-flight calls get ``grace`` seconds) and remove its socket file.

    The file is removed only if it is still ours (same inode): a newer plugin process that
    replaced it keeps its socket.
    """
    await server.stop(grace)
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_ino == inode:
            path.unlink()
