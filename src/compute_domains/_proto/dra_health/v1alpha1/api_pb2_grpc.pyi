"""Typed interface of the generated gRPC module (written by scripts/gen_proto.sh)."""

import collections.abc
import typing

import grpc
import grpc.aio

from compute_domains._proto.dra_health.v1alpha1 import api_pb2

class DRAResourceHealthStub:
    def __init__(self, channel: grpc.Channel | grpc.aio.Channel) -> None: ...
    NodeWatchResources: grpc.UnaryStreamMultiCallable[api_pb2.NodeWatchResourcesRequest, api_pb2.NodeWatchResourcesResponse]

# Not defined at run time: cast a stub built on a grpc.aio channel to this type.
class DRAResourceHealthAsyncStub:
    def __init__(self, channel: grpc.aio.Channel) -> None: ...
    NodeWatchResources: grpc.aio.UnaryStreamMultiCallable[api_pb2.NodeWatchResourcesRequest, api_pb2.NodeWatchResourcesResponse]

# Override with plain or async methods; context is grpc.ServicerContext or its aio twin.
class DRAResourceHealthServicer:
    def NodeWatchResources(self, request: api_pb2.NodeWatchResourcesRequest, context: typing.Any) -> collections.abc.Iterator[api_pb2.NodeWatchResourcesResponse] | collections.abc.AsyncIterator[api_pb2.NodeWatchResourcesResponse]: ...

def add_DRAResourceHealthServicer_to_server(
    servicer: DRAResourceHealthServicer, server: grpc.Server | grpc.aio.Server
) -> None: ...
