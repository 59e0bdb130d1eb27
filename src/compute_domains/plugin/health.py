"""Self-checks of the plugin's kubelet sockets, and the optional gRPC health service.

Healthy means what the kubelet needs: the registration socket answers ``GetInfo`` with our name
and the DRA socket answers an empty ``v1beta1`` ``NodePrepareResources`` (upstream's check).
The same probe backs ``/healthz`` on the metrics endpoint (what the chart's probes use) and the
optional standard ``grpc.health.v1.Health/Check`` service on a TCP port, which accepts the
service names ``""`` and ``"liveness"`` and answers NOT_FOUND for others.

The health messages are built from a descriptor at run time in a private descriptor pool, so
no generated code (and no extra dependency) is needed for two tiny messages.
"""

from __future__ import annotations

import logging
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


async def probe(registration_socket: Path, dra_socket: Path, timeout: float = 5.0) -> bool:
    """Whether both of our sockets answer as the kubelet expects (local paths)."""
    try:
        async with grpc.aio.insecure_channel(f"unix:{registration_socket}") as channel:
            stub = cast("reg_grpc.RegistrationAsyncStub", reg_grpc.RegistrationStub(channel))
            info = await stub.GetInfo(reg.InfoRequest(), timeout=timeout)
        async with grpc.aio.insecure_channel(f"unix:{dra_socket}") as channel:
            dra = cast("v1beta1_grpc.DRAPluginAsyncStub", v1beta1_grpc.DRAPluginStub(channel))
            await dra.NodePrepareResources(v1beta1.NodePrepareResourcesRequest(), timeout=timeout)
    except grpc.aio.AioRpcError as err:
        logger.warning("health probe failed: %s", err.details())
        return False
    return info.name == names.DRIVER_NAME


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


def health_server(registration_socket: Path, dra_socket: Path) -> grpc.aio.Server:
    """A gRPC server with ``grpc.health.v1.Health/Check`` backed by ``probe`` (not listening)."""
    request_cls, response_cls = health_messages()

    async def check(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if request.service not in _ACCEPTED_SERVICES:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        ok = await probe(registration_socket, dra_socket)
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
