"""The simulated kubelet's claim cache checkpoint: the kubelet's file format, read back."""

from __future__ import annotations

import dataclasses
import json
import logging
import zlib
from pathlib import Path

import pytest

from compute_domains.sim.kubelet import claimcache

_LOG = logging.LoggerAdapter(logging.getLogger(__name__), {})


def _entry() -> claimcache.ClaimInfo:
    return claimcache.ClaimInfo(
        uid="uid-1",
        name="claim-a",
        namespace="ns",
        pod_uids={"pod-2", "pod-1"},
        drivers=["drv.example.com"],
        devices={"drv.example.com": [{"PoolName": "p", "CDIDeviceIDs": ["k/c=d"]}]},
        prepared=True,
    )


def test_a_saved_cache_loads_back_unprepared(tmp_path: Path) -> None:
    """What a restarted kubelet finds: the same claims, pods and devices; ``prepared`` is not
    checkpointed, so a pod bound here prepares its claims again."""
    cache = claimcache.ClaimCache(tmp_path, _LOG)
    cache.entries["ns/claim-a"] = _entry()
    cache.save()
    back = claimcache.ClaimCache(tmp_path, _LOG).entries
    assert back == {"ns/claim-a": dataclasses.replace(_entry(), prepared=False)}


def test_the_file_is_the_kubelets_dra_manager_state(tmp_path: Path) -> None:
    cache = claimcache.ClaimCache(tmp_path, _LOG)
    cache.entries["ns/claim-a"] = _entry()
    cache.save()
    outer = json.loads((tmp_path / "var/lib/kubelet/dra_manager_state").read_text())
    assert outer["Checksum"] == zlib.crc32(outer["Data"].encode())
    assert json.loads(outer["Data"]) == {
        "kind": "DRACheckpoint",
        "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1",
        "ClaimInfoStateList": [
            {
                "ClaimUID": "uid-1",
                "ClaimName": "claim-a",
                "Namespace": "ns",
                "PodUIDs": {"pod-1": {}, "pod-2": {}},
                "DriverState": {
                    "drv.example.com": {"Devices": [{"PoolName": "p", "CDIDeviceIDs": ["k/c=d"]}]}
                },
            }
        ],
    }


def test_a_corrupt_checkpoint_is_logged_and_the_cache_starts_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "var/lib/kubelet/dra_manager_state"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"Data": "{}", "Checksum": 1}))
    with caplog.at_level(logging.ERROR):
        assert claimcache.ClaimCache(tmp_path, _LOG).entries == {}
    assert "checksum mismatch" in caplog.text
