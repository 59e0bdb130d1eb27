"""Typed interface of the generated gRPC module (written by scripts/gen_proto.sh)."""

import collections.abc
import typing

import grpc
import grpc.aio

from compute_domains._proto.pluginregistration.v1 import api_pb2

class RegistrationStub:
    def __init__(self, channel: grpc.Channel | grpc.aio.Channel) -> None: ...
    GetInfo: grpc.UnaryUnaryMultiCallable[api_pb2.InfoRequest, api_pb2.PluginInfo]
    NotifyRegistrationStatus: grpc.UnaryUnaryMultiCallable[api_pb2.RegistrationStatus, api_pb2.RegistrationStatusResponse]

# Not defined at run time: cast a stub built on a grpc.aio channel to this type.
class RegistrationAsyncStub:
    def __init__(self, channel: grpc.aio.Channel) -> None: ...
    GetInfo: grpc.aio.UnaryUnaryMultiCallable[api_pb2.InfoRequest, api_pb2.PluginInfo]
    NotifyRegistrationStatus: grpc.aio.UnaryUnaryMultiCallable[api_pb2.RegistrationStatus, api_pb2.RegistrationStatusResponse]

# Override with plain or async methods; context is grpc.ServicerContext or its aio twin.
class RegistrationServicer:
    def GetInfo(self, request: api_pb2.InfoRequest, context: typing.Any) -> api_pb2.PluginInfo | collections.abc.Awaitable[api_pb2.PluginInfo]: ...
    def NotifyRegistrationStatus(self, request: api_pb2.RegistrationStatus, context: typing.Any) -> api_pb2.RegistrationStatusResponse | collections.abc.Awaitable[api_pb2.RegistrationStatusResponse]: ...

def add_RegistrationServicer_to_server(
    servicer: RegistrationServicer, server: grpc.Server | grpc.aio.Server
) -> None: ...
