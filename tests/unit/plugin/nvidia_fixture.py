"""Checkpoint files as NVIDIA's v25.12 kubelet plugin writes them, built from the format's facts.

Go's ``encoding/json`` writes struct fields in declaration order, leaves out ``omitempty``
fields that are empty, sorts map keys and writes no whitespace; the dicts below are built in
that order and dumped compactly, so the text is byte for byte what NVIDIA's plugin writes.
The checksums of ``checkpoint_text()`` are pinned in ``TOP_CHECKSUM``/``V2_CHECKSUM``: NVIDIA's
v25.12.0 code (``Checkpoint.UnmarshalCheckpoint`` + ``VerifyChecksum``, run once outside this
repository) accepted exactly these bytes and re-marshalled them unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from compute_domains.api import names
from tests.unit.plugin import fakes

NODE = fakes.NODE
CD = "5d8e2f4a-1c3b-4e6f-9a7d-0b2c4e6f8a1d"
WORKLOAD = "3f2a9c1e-7b4d-4e8a-b5c6-1d2e3f4a5b6c"
"""A workload's channel claim, ``PrepareCompleted`` (its pod runs)."""
DAEMON = "8b7c6d5e-4f3a-4b2c-9d1e-0f1a2b3c4d5e"
"""The IMEX daemon's claim, ``PrepareCompleted``."""
STALE = "c4d5e6f7-0a1b-4c2d-8e3f-9a0b1c2d3e4f"
"""A channel claim left in ``PrepareStarted`` (its prepare never finished; the claim is gone)."""
STALE_NAME, STALE_NAMESPACE = "workload-1-channel-x7k2p", "default"
TOP_CHECKSUM = 2353493329
"""NVIDIA's top-level checksum of ``checkpoint_text()`` (over ``v1``)."""
V2_CHECKSUM = 3653394666
"""NVIDIA's ``v2.checksum`` of ``checkpoint_text()``."""
CLAIM_KIND = "k8s.compute-domain.nvidia.com/claim"


def compact(doc: object) -> str:
    """Go ``json.Marshal`` layout for these ASCII-only documents."""
    return json.dumps(doc, separators=(",", ":"))


def status(
    request: str, device: str, params: dict[str, Any], pod: str, pod_uid: str
) -> dict[str, Any]:
    """A ResourceClaimStatus in ``k8s.io/api/resource/v1`` field order."""
    return {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": request,
                        "driver": names.DRIVER_NAME,
                        "pool": NODE,
                        "device": device,
                    }
                ],
                "config": [
                    {
                        "source": "FromClaim",
                        "requests": [request],
                        "opaque": {"driver": names.DRIVER_NAME, "parameters": params},
                    }
                ],
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                ]
            },
            "allocationTimestamp": "2026-03-02T10:15:04Z",
        },
        "reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid}],
    }


def channel_params() -> dict[str, Any]:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "ComputeDomainChannelConfig",
        "domainID": CD,
        "allocationMode": "Single",
    }


def group(kind: str, uid: str, cdi_ids: list[str], request: str) -> dict[str, Any]:
    """One prepared device group: the device under ``channel`` or ``daemon``, the other null."""
    device = {
        "Requests": [request],
        "PoolName": NODE,
        "DeviceName": f"{kind}-0",
        "CDIDeviceIDs": cdi_ids,
    }
    entry = {
        k: ({"info": {"id": 0}, "device": device} if k == kind else None)
        for k in ("channel", "daemon")
    }
    return {"devices": [entry], "configState": {"Type": kind, "ComputeDomain": CD}}


def claims() -> dict[str, dict[str, Any]]:
    """The v2 claims: a completed workload claim, a completed daemon claim, a started one."""
    daemon_params = {
        "apiVersion": names.API_VERSION,
        "kind": "ComputeDomainDaemonConfig",
        "domainID": CD,
    }
    return {
        WORKLOAD: {
            "checkpointState": "PrepareCompleted",
            "status": status(
                "channel",
                "channel-0",
                channel_params(),
                "workload-0",
                "0a9b8c7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d",
            ),
            "preparedDevices": [
                group("channel", WORKLOAD, [f"{CLAIM_KIND}={WORKLOAD}-channel-0"], "channel")
            ],
        },
        DAEMON: {
            "checkpointState": "PrepareCompleted",
            "status": status(
                "daemon",
                "daemon-0",
                daemon_params,
                "computedomain-daemon-x2v9q",
                "1b2c3d4e-5f6a-4b7c-8d9e-0f1a2b3c4d5e",
            ),
            "preparedDevices": [
                group(
                    "daemon",
                    DAEMON,
                    ["k8s.compute-domain.nvidia.com/device=all", f"{CLAIM_KIND}={DAEMON}-daemon-0"],
                    "daemon",
                )
            ],
        },
        STALE: {
            "checkpointState": "PrepareStarted",
            "status": status(
                "channel",
                "channel-0",
                channel_params(),
                "workload-1",
                "2c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e6f",
            ),
            "name": STALE_NAME,
            "namespace": STALE_NAMESPACE,
        },
    }


def checkpoint_text(
    v2_claims: dict[str, dict[str, Any]] | None = None,
    *,
    sign: Callable[[bytes], int] | None = None,
    with_v2: bool = True,
) -> str:
    """The file NVIDIA writes for ``v2_claims`` (default ``claims()``).

    Args:
        v2_claims: the v2 claims; v1 gets the completed ones without state, name, namespace.
        sign: computes a checksum; default: the pinned values (valid for ``claims()`` only).
        with_v2: False writes a v1-only file, as releases before v2 did.
    """
    v2_claims = claims() if v2_claims is None else v2_claims
    v1_claims = {
        uid: {k: c[k] for k in ("status", "preparedDevices") if k in c}
        for uid, c in sorted(v2_claims.items())
        if c["checkpointState"] == "PrepareCompleted"
    }
    v1 = {"preparedClaims": v1_claims} if v1_claims else {}
    v2: dict[str, Any] = {"checksum": 0}
    if v2_claims:
        v2["preparedClaims"] = dict(sorted(v2_claims.items()))
    top: dict[str, Any] = {"checksum": 0, "v1": v1}
    if sign is None:
        top["checksum"], v2["checksum"] = TOP_CHECKSUM, V2_CHECKSUM
    else:
        v2["checksum"] = sign(compact(v2).encode())
        top["checksum"] = sign(compact(top).encode())
    if with_v2:
        top["v2"] = v2
    return compact(top)
