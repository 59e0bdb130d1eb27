"""The simulated kubelet's client of one registered DRA plugin: prepare and unprepare calls.

A ``Plugin`` is what registration found (driver name, endpoint, the gRPC service version it
chose) with an open channel. ``prepare`` and ``unprepare`` make one batched
``NodePrepareResources``/``NodeUnprepareResources`` call in that version (v1 or v1beta1, same
messages), with the caller's deadline, and turn every failure into ``PrepareError`` with the
1.34 kubelet's message: an RPC error, a claim's own error, a result for a claim that was not
asked for, or claims left out of the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

from compute_domains._proto.dra.v1 import api_pb2 as v1
from compute_domains._proto.dra.v1 import api_pb2_grpc as v1_grpc
from compute_domains._proto.dra.v1beta1 import api_pb2 as v1beta1
from compute_domains._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from compute_domains.sim.kubelet import claimcache, errors

SERVICES = {"v1.DRAPlugin": "v1", "v1beta1.DRAPlugin": "v1beta1"}
"""gRPC service a plugin may offer → the version name this kubelet speaks, in its preference."""


@dataclasses.dataclass(slots=True)
class Plugin:
    """A registered DRA plugin."""

    driver: str
    endpoint: Path
    """The plugin's service socket on this machine (under the node root)."""
    version: str
    """``v1`` or ``v1beta1`` (a key's value of ``SERVICES``)."""
    channel: grpc.aio.Channel


def _stub(plugin: Plugin) -> tuple[Any, Any]:
    """The messages module and a stub of the plugin's chosen version."""
    if plugin.version == "v1":
        return v1, v1_grpc.DRAPluginStub(plugin.channel)
    return v1beta1, v1beta1_grpc.DRAPluginStub(plugin.channel)


async def _call(
    plugin: Plugin, method: str, entries: Sequence[claimcache.ClaimInfo], timeout: float
) -> Any:
    """``method`` (``NodePrepareResources`` or ``NodeUnprepareResources``) for ``entries``;
    an RPC failure is ``PrepareError`` with the kubelet's text."""
    pb, stub = _stub(plugin)
    claims = [pb.Claim(namespace=e.namespace, uid=e.uid, name=e.name) for e in entries]
    req = getattr(pb, f"{method}Request")(claims=claims)
    try:
        return await getattr(stub, method)(req, timeout=timeout)
    except grpc.aio.AioRpcError as err:
        raise errors.PrepareError(
            f"{method}: rpc error: code = {err.code().name} desc = {err.details()}"
        ) from err
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # this pod's work is being stopped
        # grpc.aio cancels the calls in flight on a channel that is closed, i.e. when the
        # plugin re-registers or goes away (a restart): the caller is not being stopped, so
        # this is a failed call the pod worker retries, as the kubelet's gRPC client reports it.
        # Left as a CancelledError it ended the pod's start silently (issue 15's stalled
        # prepares at N = 72 and in the 256-pod shape).
        raise errors.PrepareError(
            f"{method}: rpc error: code = Canceled desc = grpc: the client connection is closing"
        ) from None


async def prepare(
    plugin: Plugin, entries: Sequence[claimcache.ClaimInfo], timeout: float
) -> dict[str, list[dict[str, Any]]]:
    """Prepare ``entries``; claim UID → its devices as the checkpoint records them.

    Raises:
        errors.PrepareError: the call failed, or any claim failed or was left out.
    """
    resp = await _call(plugin, "NodePrepareResources", entries, timeout)
    by_uid = {e.uid: e for e in entries}
    for uid in resp.claims:
        if uid not in by_uid:
            raise errors.PrepareError(
                f"NodePrepareResources returned result for unknown claim UID {uid}"
            )
    for uid, result in resp.claims.items():
        if result.error:
            raise errors.PrepareError(
                f"NodePrepareResources failed for ResourceClaim {by_uid[uid].name}: {result.error}"
            )
    if len(resp.claims) < len(entries):
        raise errors.PrepareError(
            f"NodePrepareResources skipped {len(entries) - len(resp.claims)} ResourceClaims"
        )
    return {
        uid: [
            {
                "PoolName": d.pool_name,
                "DeviceName": d.device_name,
                "RequestNames": list(d.request_names),
                "CDIDeviceIDs": list(d.cdi_device_ids),
            }
            for d in result.devices
        ]
        for uid, result in resp.claims.items()
    }


async def unprepare(
    plugin: Plugin, entries: Sequence[claimcache.ClaimInfo], timeout: float
) -> None:
    """Unprepare ``entries`` (a claim missing from the answer counts as done, as in 1.34).

    Raises:
        errors.PrepareError: the call failed, or a claim failed.
    """
    resp = await _call(plugin, "NodeUnprepareResources", entries, timeout)
    for e in entries:
        result = resp.claims.get(e.uid)
        if result is not None and result.error:
            raise errors.PrepareError(
                f"NodeUnprepareResources failed for ResourceClaim {e.name}: {result.error}"
            )
