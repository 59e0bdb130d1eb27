"""The simulated kubelet's calls to a DRA plugin (sim/kubelet/draplugin.py) against a real gRPC
server on a unix socket: a call cut by the plugin going away is a failed call to retry, never a
silent end of the pod's start."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from compute_domains._proto.dra.v1 import api_pb2 as v1
from compute_domains._proto.dra.v1 import api_pb2_grpc as v1_grpc
from compute_domains.sim.kubelet import claimcache, draplugin, errors


class _Stalled(v1_grpc.DRAPluginServicer):
    """A plugin whose prepare does not answer until it is released."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.release = asyncio.Event()

    async def NodePrepareResources(self, request: Any, context: Any) -> Any:
        self.called.set()
        await self.release.wait()
        return v1.NodePrepareResourcesResponse()


def _entry() -> claimcache.ClaimInfo:
    return claimcache.ClaimInfo(
        uid="u1", name="c1", namespace="ns", pod_uids={"p1"}, drivers=["d"], devices={}
    )


@contextlib.asynccontextmanager
async def _serving(tmp_path: Path) -> AsyncIterator[tuple[_Stalled, draplugin.Plugin]]:
    """A stalled plugin served on a unix socket, and the kubelet's channel to it."""
    plugin_side = _Stalled()
    server = grpc.aio.server()
    v1_grpc.add_DRAPluginServicer_to_server(plugin_side, server)
    sock = tmp_path / "dra.sock"
    server.add_insecure_port(f"unix:{sock}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"unix:{sock}")
    try:
        yield plugin_side, draplugin.Plugin("d", sock, "v1", channel)
    finally:
        plugin_side.release.set()
        await channel.close()
        await server.stop(None)


async def test_a_channel_closed_under_a_call_is_a_prepare_error(tmp_path: Path) -> None:
    async with _serving(tmp_path) as (plugin_side, plugin):
        call = asyncio.create_task(draplugin.prepare(plugin, [_entry()], timeout=30))
        await plugin_side.called.wait()
        await plugin.channel.close()  # what re-registration and deregistration do
        with pytest.raises(errors.PrepareError, match="code = Canceled"):
            await call


async def test_stopping_the_caller_still_cancels_it(tmp_path: Path) -> None:
    async with _serving(tmp_path) as (plugin_side, plugin):
        call = asyncio.create_task(draplugin.prepare(plugin, [_entry()], timeout=30))
        await plugin_side.called.wait()
        call.cancel()  # the pod worker is stopped: the cancellation must go through
        with pytest.raises(asyncio.CancelledError):
            await call
