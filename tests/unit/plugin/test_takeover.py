"""Taking over a node from NVIDIA's plugin: checkpoint, CDI specs, and the claims afterwards."""

from __future__ import annotations

import datetime
import json
import logging
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models import meta_v1
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.infra import cdispec
from compute_domains.plugin import (
    cdi,
    checkpoint,
    checkpointfile,
    cleanup,
    devices,
    driver,
    metrics,
    takeover,
)
from compute_domains.plugin import nvidia_checkpoint as nv
from compute_domains.plugin.config import CleanupSettings, RetrySettings
from tests.unit.plugin import fakes
from tests.unit.plugin import nvidia_fixture as fx

State = checkpoint.ClaimState
BOOT = "6f1f6f3e-8a3b-4c1e-9d7a-2b1c3d4e5f60"
NOW = datetime.datetime(2026, 3, 2, 11, 0, tzinfo=datetime.UTC)
OUR_BASE = {
    "cdiVersion": "0.3.0",
    "kind": cdi.BASE_KIND,
    "devices": [{"name": "all", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}],
}


def _nvidia_spec(uid: str, device: str) -> dict[str, Any]:
    """A claim CDI spec as NVIDIA's plugin writes it (YAML via sigs.k8s.io/yaml: sorted keys)."""
    node = {
        "fileMode": 438,
        "major": 238,
        "minor": 0,
        "path": "/dev/nvidia-caps-imex-channels/channel0",
        "type": "c",
    }
    return {
        "cdiVersion": "0.5.0",
        "containerEdits": {},
        "devices": [{"containerEdits": {"deviceNodes": [node]}, "name": f"{uid}-{device}"}],
        "kind": cdi.CLAIM_KIND,
    }


def _node_as_nvidia_left_it(
    root: Path, *, specs: tuple[str, ...] = (fx.WORKLOAD, fx.DAEMON)
) -> tuple[Path, Path]:
    """NVIDIA's checkpoint, its claim specs and base spec, and our base spec (written at start)."""
    state = fakes.device_state(root, fakes.FakeDomains())
    path, cdi_root = state.checkpoint_path, state.writer.root
    path.parent.mkdir(parents=True, exist_ok=True)
    cdi_root.mkdir(parents=True, exist_ok=True)
    path.write_text(fx.checkpoint_text())
    for uid in specs:
        device = "daemon-0" if uid == fx.DAEMON else "channel-0"
        (cdi_root / f"{cdi.CDI_VENDOR}-claim_{uid}.yaml").write_text(
            yaml.safe_dump(_nvidia_spec(uid, device))
        )
    base = {
        **OUR_BASE,
        "devices": [
            {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]}}
        ],
    }
    (cdi_root / takeover.NVIDIA_BASE_SPEC).write_text(yaml.safe_dump(base))
    (cdi_root / cdi.BASE_SPEC_FILE).write_text(json.dumps(OUR_BASE))
    return path, cdi_root


def _take_over(path: Path, cdi_root: Path) -> takeover.Takeover | None:
    offered = devices.allocatable(4)
    return takeover.take_over(path, cdi_root=cdi_root, node=fx.NODE, offered=offered, now=NOW)


def _resolves(cdi_root: Path, device_id: str) -> bool:
    specs, _bad = cdispec.load_spec_dirs([cdi_root])
    try:
        cdispec.container_edits_for([device_id], specs)
    except cdispec.UnresolvableDevicesError:
        return False
    return True


def test_claims_are_adopted_or_restarted_and_nvidias_file_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, cdi_root = _node_as_nvidia_left_it(tmp_path)
    original = path.read_bytes()
    assert not _resolves(cdi_root, f"{cdi.BASE_KIND}=all"), "two base specs conflict"
    with caplog.at_level(logging.INFO, logger="compute_domains.plugin.takeover"):
        done = _take_over(path, cdi_root)
    assert done is not None and done.specs_converted == 2
    assert done.backup == path.with_name("checkpoint.json.nvidia-v25.12")
    assert done.backup.read_bytes() == original

    ours = checkpointfile.load(path)  # our format now, with our checksum
    assert ours is not None and ours == done.checkpoint
    workload, daemon, stale = (ours.claims[u] for u in (fx.WORKLOAD, fx.DAEMON, fx.STALE))
    assert (workload.state, daemon.state, stale.state) == (
        State.PREPARE_COMPLETED,
        State.PREPARE_COMPLETED,
        State.PREPARE_STARTED,
    )
    nvidia = {c.uid: c for c in nv.decode(original) or ()}
    assert workload.devices == nvidia[fx.WORKLOAD].devices, "the kubelet's CDI IDs stay valid"
    assert daemon.devices == nvidia[fx.DAEMON].devices
    assert workload.status == nvidia[fx.WORKLOAD].status
    # The started claim records the devices it planned, as our own first prepare step does.
    assert [(d.device_name, d.kind, d.domain_uid, d.cdi_device_ids) for d in stale.devices] == [
        ("channel-0", "channel", fx.CD, ())
    ]
    assert (stale.namespace, stale.name) == (fx.STALE_NAMESPACE, fx.STALE_NAME)

    # CDI: NVIDIA's YAML specs became ours, same content; its base spec no longer shadows ours.
    assert not list(cdi_root.glob("*.yaml"))
    converted = json.loads((cdi_root / cdi.claim_spec_file_name(fx.WORKLOAD)).read_text())
    assert converted == _nvidia_spec(fx.WORKLOAD, "channel-0")
    for device_id in (*workload.devices[0].cdi_device_ids, *daemon.devices[0].cdi_device_ids):
        assert _resolves(cdi_root, device_id), device_id

    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    per_claim = [line for line in lines if line.startswith("Took over claim ")]
    assert len(per_claim) == 3
    assert any(
        fx.WORKLOAD in x and "PrepareCompleted there, PrepareCompleted here" in x for x in per_claim
    )
    assert any(
        f"{fx.STALE_NAMESPACE}/{fx.STALE_NAME} ({fx.STALE})" in x and "PrepareStarted here" in x
        for x in per_claim
    )
    (summary,) = [line for line in lines if line.startswith("Took over NVIDIA's")]
    assert "2 claims adopted as PrepareCompleted, 1 as PrepareStarted, 2 CDI specs" in summary


def test_a_completed_claim_whose_cdi_spec_is_gone_is_prepared_again(tmp_path: Path) -> None:
    path, cdi_root = _node_as_nvidia_left_it(tmp_path, specs=(fx.DAEMON,))
    done = _take_over(path, cdi_root)
    assert done is not None
    entry = done.checkpoint.claims[fx.WORKLOAD]
    assert entry.state is State.PREPARE_STARTED
    assert [d.cdi_device_ids for d in entry.devices] == [()]
    assert done.checkpoint.claims[fx.DAEMON].state is State.PREPARE_COMPLETED


def test_a_takeover_cut_short_runs_again_to_the_same_result(tmp_path: Path) -> None:
    path, cdi_root = _node_as_nvidia_left_it(tmp_path)
    original = path.read_bytes()
    first = _take_over(path, cdi_root)
    path.write_bytes(original)  # as if the plugin died before saving our checkpoint
    again = _take_over(path, cdi_root)
    assert first is not None and again is not None
    assert again.checkpoint == first.checkpoint and again.backup == first.backup
    assert again.specs_converted == 0, "the specs were already ours"
    assert sorted(p.name for p in path.parent.glob("checkpoint.json*")) == [
        "checkpoint.json",
        "checkpoint.json.nvidia-v25.12",
    ]


def test_an_earlier_different_backup_is_never_overwritten(tmp_path: Path) -> None:
    path, cdi_root = _node_as_nvidia_left_it(tmp_path)
    earlier = path.with_name("checkpoint.json.nvidia-v25.12")
    earlier.write_bytes(b"an older takeover's copy")
    done = _take_over(path, cdi_root)
    assert done is not None and done.backup == earlier.with_name(f"{earlier.name}.20260302T110000Z")
    assert earlier.read_bytes() == b"an older takeover's copy"


def test_a_damaged_nvidia_checkpoint_is_refused_and_nothing_is_touched(tmp_path: Path) -> None:
    path, cdi_root = _node_as_nvidia_left_it(tmp_path)
    tampered = fx.checkpoint_text().replace(fx.STALE_NAME, "someone-else").encode()
    path.write_bytes(tampered)
    before = sorted(p.name for p in cdi_root.iterdir())
    with pytest.raises(checkpointfile.CheckpointCorruptError, match="checksum") as caught:
        _take_over(path, cdi_root)
    assert caught.value.reason is checkpointfile.CorruptionReason.CHECKSUM_MISMATCH
    assert path.read_bytes() == tampered
    assert sorted(p.name for p in cdi_root.iterdir()) == before
    assert not path.with_name("checkpoint.json.nvidia-v25.12").exists()


@pytest.mark.parametrize(
    "content", [None, checkpointfile.encode(checkpoint.Checkpoint(boot_id=BOOT)), b"{half a checkp"]
)
def test_our_own_missing_or_garbage_checkpoint_is_left_to_our_reader(
    tmp_path: Path, content: bytes | None
) -> None:
    state = fakes.device_state(tmp_path, fakes.FakeDomains())
    path = state.checkpoint_path
    path.parent.mkdir(parents=True)
    if content is not None:
        path.write_bytes(content)
    assert _take_over(path, state.writer.root) is None
    assert (path.read_bytes() if path.exists() else None) == content


# ---- the state level: start-up on NVIDIA's checkpoint, then the kubelet and the cleanup ----


class _Claims:
    """The API as the cleanup and the driver see it: the stale claim is gone, others exist."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def get(self, _kind: object, name: str, *, namespace: str) -> ResourceClaim:
        self.asked.append(f"{namespace}/{name}")
        if name == fx.STALE_NAME:
            raise ApiError(status=meta_v1.Status(code=404, message="not found"))
        uid = {"workload-0-channel": fx.WORKLOAD}[name]
        status = fx.claims()[uid]["status"]
        meta = {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "9"}
        return ResourceClaim.from_dict({"metadata": meta, "spec": {}, "status": status})

    async def raw(self, namespace: str, name: str) -> bytes:
        """The claim's JSON, as the plugin reads it (``Driver``'s ``read_claim``)."""
        return json.dumps((await self.get(None, name, namespace=namespace)).to_dict()).encode()


async def test_after_start_up_on_nvidias_checkpoint_unprepare_succeeds_and_stale_claims_go(
    tmp_path: Path,
) -> None:
    _node_as_nvidia_left_it(tmp_path)
    domains = fakes.FakeDomains(fakes.compute_domain(fx.CD, namespace=fx.STALE_NAMESPACE))
    domains.node_label = fx.CD  # NVIDIA's plugin labelled the node for the running workload
    s = fakes.device_state(tmp_path, domains)
    boot = await s.open_for_boot(BOOT)
    assert set(boot.checkpoint.claims) == {fx.WORKLOAD, fx.DAEMON, fx.STALE}
    assert checkpointfile.load(s.checkpoint_path) == boot.checkpoint, "stamped and saved as ours"
    assert s.holder == fx.CD, "the ResourceSlice keeps the node bound to the running domain"

    # The start-up cleanup pass: the started claim's ResourceClaim is gone, so it is undone;
    # the adopted claims have no name (NVIDIA keeps none) and wait for the kubelet.
    client = _Claims()
    sweeper = cleanup.Cleanup(
        client=cast(AsyncClient, client),
        device_state=s,
        domains=domains,
        shared_imex=fakes.FakeShared(domains),
        settings=CleanupSettings(tombstone_ttl_s=3600),
        node=fx.NODE,
    )
    await sweeper.run_once()
    assert client.asked == [f"{fx.STALE_NAMESPACE}/{fx.STALE_NAME}"]
    async with s.transaction() as txn:
        assert txn.current.claims[fx.STALE].state is State.UNPREPARED
        assert txn.current.claims[fx.WORKLOAD].state is State.PREPARE_COMPLETED
    assert domains.node_label == fx.CD, "the adopted workload claim still holds the label"
    assert s.writer.claim_spec_path(fx.WORKLOAD).exists(), "a live claim's spec is no orphan"

    # The kubelet: a repeated prepare returns NVIDIA's devices; then pods go and it unprepares.
    plugin = driver.Driver(
        client=cast(AsyncClient, client),
        read_claim=client.raw,
        device_state=s,
        node=fx.NODE,
        retry=RetrySettings(budget_s=2.0),
        metrics=metrics.PluginMetrics(fx.NODE),
    )
    ref = driver.ClaimRef(namespace="default", name="workload-0-channel", uid=fx.WORKLOAD)
    again = (await plugin.prepare([ref]))[fx.WORKLOAD]
    assert again.error == "" and again.devices == boot.checkpoint.claims[fx.WORKLOAD].devices
    daemon_ref = driver.ClaimRef(namespace="nvidia-dra-driver-gpu", name="d", uid=fx.DAEMON)
    assert await plugin.unprepare([ref, daemon_ref]) == {fx.WORKLOAD: "", fx.DAEMON: ""}
    assert domains.node_label == "", "the last claim of the domain released the node label"
    assert not s.writer.claim_spec_path(fx.WORKLOAD).exists()
    assert not s.writer.claim_spec_path(fx.DAEMON).exists()
    async with s.transaction() as txn:
        assert {u: e.state for u, e in txn.current.claims.items()} == dict.fromkeys(
            (fx.WORKLOAD, fx.DAEMON, fx.STALE), State.UNPREPARED
        )
    assert s.holder == ""


async def test_start_up_on_a_truly_corrupt_checkpoint_is_still_refused(tmp_path: Path) -> None:
    s = fakes.device_state(tmp_path, fakes.FakeDomains())
    s.checkpoint_path.parent.mkdir(parents=True)
    s.checkpoint_path.write_text('{"checksum":12,"v1":{"preparedClaims":')
    with pytest.raises(checkpointfile.CheckpointCorruptError) as caught:
        await s.open_for_boot(BOOT)
    assert caught.value.reason is checkpointfile.CorruptionReason.INVALID_JSON
