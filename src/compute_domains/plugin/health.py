"""Self-checks of the plugin's kubelet sockets, and the optional gRPC health service.

Healthy means what the kubelet needs: the registration socket answers ``GetInfo`` with our name
and the DRA socket answers an empty ``v1beta1`` ``NodePrepareResources`` (upstream's check).
The same probe backs ``/healthz`` on the metrics endpoint (what the chart's probes use) and the
optional standard ``grpc.health.v1.Health/Check`` service on a TCP port, which accepts the
service names ``""`` and ``"liveness"`` and answers NOT_FOUND for others.

``SelfCheck`` keeps its two channels between probes: a new channel per probe was most of the
cost of a liveness probe (two connections and HTTP/2 handshakes every 10 s, per node). So that a
kept connection cannot hide a socket the kubelet could no longer connect to, a socket file that
is gone or was replaced (another inode) fails the check and the channels are opened anew.

The health messages are built from a descriptor at run time in a private descriptor pool, so
no generated code (and no extra dependency) is needed for two tiny messages.
"""

from __future__ import annotations

import logging
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from compute_domains._proto.dra.v1beta1 import api_pb2 as v1beta1
from compute_domains._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from compute_domains._proto.pluginregistration.v1 import api_pb2 as reg
from compute_domains._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from compute_domains.api import names

logger = logging.getLogger(__name__)

HEALTH_SERVICE = "grpc.health.v1.Health"
SERVING, NOT_SERVING = 1, 2
_ACCEPTED_SERVICES = ("", "liveness")


class SelfCheck:
    """The probe of both of our sockets (local paths), with its channels kept between calls;
    ``close()`` when the plugin stops."""

    def __init__(self, registration_socket: Path, dra_socket: Path, timeout: float = 5.0) -> None:
        self._paths = (registration_socket, dra_socket)
        self._timeout = timeout
        self._channels: tuple[grpc.aio.Channel, grpc.aio.Channel] | None = None
        self._inodes: tuple[int, int] = (0, 0)

    def _current_inodes(self) -> tuple[int, int] | None:
        try:
            stats = tuple(p.stat() for p in self._paths)
        except OSError:
            return None
        if not all(stat.S_ISSOCK(st.st_mode) for st in stats):
            return None
        return stats[0].st_ino, stats[1].st_ino

    async def __call__(self) -> bool:
        """Whether both sockets answer as the kubelet expects."""
        inodes = self._current_inodes()
        if inodes is None:
            await self.close()
            logger.warning("health probe failed: socket %s or %s is missing", *self._paths)
            return False
        if self._channels is None or inodes != self._inodes:
            await self.close()
            self._channels = tuple(  # type: ignore[assignment]
                grpc.aio.insecure_channel(f"unix:{p}") for p in self._paths
            )
            self._inodes = inodes
        assert self._channels is not None
        reg_channel, dra_channel = self._channels
        try:
            stub = cast("reg_grpc.RegistrationAsyncStub", reg_grpc.RegistrationStub(reg_channel))
            info = await stub.GetInfo(reg.InfoRequest(), timeout=self._timeout)
            dra = cast("v1beta1_grpc.DRAPluginAsyncStub", v1beta1_grpc.DRAPluginStub(dra_channel))
            await dra.NodePrepareResources(
                v1beta1.NodePrepareResourcesRequest(), timeout=self._timeout
            )
        except grpc.aio.AioRpcError as err:
            logger.warning("health probe failed: %s", err.details())
            await self.close()
            return False
        return info.name == names.DRIVER_NAME

    async def close(self) -> None:
        """Close the kept channels (the next call opens new ones)."""
        channels, self._channels = self._channels, None
        for channel in channels or ():
            await channel.close()


async def probe(registration_socket: Path, dra_socket: Path, timeout: float = 5.0) -> bool:
    """One probe of both sockets on channels of its own."""
    check = SelfCheck(registration_socket, dra_socket, timeout)
    try:
        return await check()
    finally:
        await check.close()


def health_messages() -> tuple[type[message.Message], type[message.Message]]:
    """The ``HealthCheckRequest`` and ``HealthCheckResponse`` classes (from a private pool)."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="grpc/health/v1/health.proto", package="grpc.health.v1", syntax="proto3"
    )
    f = descriptor_pb2.FieldDescriptorProto
    request = fdp.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    response = fdp.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for number, value in enumerate(("UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN")):
        status.value.add(name=value, number=number)
    response.field.add(
        name="status",
        number=1,
        type=f.TYPE_ENUM,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
        label=f.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return (
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")
        ),
        message_factory.GetMessageClass(
            pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")
        ),
    )


def health_server(probe: Callable[[], Awaitable[bool]]) -> grpc.aio.Server:
    """A gRPC server with ``grpc.health.v1.Health/Check`` backed by ``probe`` (not listening)."""
    request_cls, response_type = health_messages()
    # Fields of a message class made from a descriptor at run time are unknown to the stubs
    # (types-protobuf >= 7.35 types ``Message.__init__`` without keyword fields).
    response_cls: Any = response_type

    async def check(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if request.service not in _ACCEPTED_SERVICES:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        ok = await probe()
        return response_cls(status=SERVING if ok else NOT_SERVING)

    handler = grpc.method_handlers_generic_handler(
        HEALTH_SERVICE,
        {
            "Check": grpc.unary_unary_rpc_method_handler(
                check,
                request_deserializer=request_cls.FromString,
                response_serializer=response_cls.SerializeToString,
            )
        },
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    return server
