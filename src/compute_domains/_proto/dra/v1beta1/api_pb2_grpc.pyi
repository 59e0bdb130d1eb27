"""Typed interface of the generated gRPC module (written by scripts/gen_proto.sh)."""

import collections.abc
import typing

import grpc
import grpc.aio

from compute_domains._proto.dra.v1beta1 import api_pb2

class DRAPluginStub:
    def __init__(self, channel: grpc.Channel | grpc.aio.Channel) -> None: ...
    NodePrepareResources: grpc.UnaryUnaryMultiCallable[api_pb2.NodePrepareResourcesRequest, api_pb2.NodePrepareResourcesResponse]
    NodeUnprepareResources: grpc.UnaryUnaryMultiCallable[api_pb2.NodeUnprepareResourcesRequest, api_pb2.NodeUnprepareResourcesResponse]

# Not defined at run time: cast a stub built on a grpc.aio channel to this type.
class DRAPluginAsyncStub:
    def __init__(self, channel: grpc.aio.Channel) -> None: ...
    NodePrepareResources: grpc.aio.UnaryUnaryMultiCallable[api_pb2.NodePrepareResourcesRequest, api_pb2.NodePrepareResourcesResponse]
    NodeUnprepareResources: grpc.aio.UnaryUnaryMultiCallable[api_pb2.NodeUnprepareResourcesRequest, api_pb2.NodeUnprepareResourcesResponse]

# Override with plain or async methods; context is grpc.ServicerContext or its aio twin.
class DRAPluginServicer:
    def NodePrepareResources(self, request: api_pb2.NodePrepareResourcesRequest, context: typing.Any) -> api_pb2.NodePrepareResourcesResponse | collections.abc.Awaitable[api_pb2.NodePrepareResourcesResponse]: ...
    def NodeUnprepareResources(self, request: api_pb2.NodeUnprepareResourcesRequest, context: typing.Any) -> api_pb2.NodeUnprepareResourcesResponse | collections.abc.Awaitable[api_pb2.NodeUnprepareResourcesResponse]: ...

def add_DRAPluginServicer_to_server(
    servicer: DRAPluginServicer, server: grpc.Server | grpc.aio.Server
) -> None: ...
