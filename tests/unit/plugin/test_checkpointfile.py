import dataclasses
import datetime
import hashlib
import json
from pathlib import Path

import pytest

from compute_domains.api import sharedimex
from compute_domains.infra import errors
from compute_domains.plugin import checkpoint as cp
from compute_domains.plugin import checkpointfile as cpf

T0 = datetime.datetime(2026, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(seconds=3)
BOOT = "6f1f6f3e-8a3b-4c1e-9d7a-2b1c3d4e5f60"
OTHER_BOOT = "00000000-1111-2222-3333-444444444444"


def _entry(
    uid: str = "uid-1", state: cp.ClaimState = cp.ClaimState.PREPARE_COMPLETED
) -> cp.ClaimEntry:
    return cp.ClaimEntry(
        uid=uid,
        namespace="ns",
        name="claim",
        state=state,
        started_at=T0,
        updated_at=T1,
        devices=(
            cp.PreparedDevice(
                pool_name="node-a",
                device_name="channel-0",
                request_names=("channel",),
                cdi_device_ids=(f"k8s.compute-domain.nvidia.com/claim={uid}-channel-0",),
                kind="channel",
                domain_uid="cd-uid",
            ),
        ),
        status={"allocation": {"devices": {"results": [{"device": "channel-0"}]}}},
        resource_version="42",
    )


def _sample() -> cp.Checkpoint:
    return (
        cp.Checkpoint(boot_id=BOOT)
        .with_claim(_entry())
        .with_claim(_entry("uid-2", cp.ClaimState.PREPARE_STARTED))
    )


def test_round_trip_through_a_file_keeps_every_field(tmp_path: Path) -> None:
    path = tmp_path / "plugin" / cpf.FILE_NAME
    cpf.save(path, _sample())
    assert cpf.load(path) == _sample()
    assert path.stat().st_mode & 0o777 == 0o600


def test_empty_checkpoint_bytes_are_pinned() -> None:
    # Golden file: changing the layout or the checksum rule must be a new format version.
    canonical = f'{{"claims":{{}},"nodeBootID":"{BOOT}","version":2}}'.encode()
    digest = hashlib.sha256(canonical).hexdigest()
    assert digest == "a107e8d6342d935c3e8dda8bb80bd5baa7b720c32e6d05daf3fa322cd8f20032"
    expected = (
        "{\n"
        f'  "checksum": "sha256:{digest}",\n'
        '  "claims": {},\n'
        f'  "nodeBootID": "{BOOT}",\n'
        '  "version": 2\n'
        "}\n"
    )
    assert cpf.encode(cp.Checkpoint(boot_id=BOOT)).decode() == expected


def test_golden_entry_layout() -> None:
    doc = json.loads(cpf.encode(cp.Checkpoint(boot_id=BOOT).with_claim(_entry())))
    assert doc["claims"]["uid-1"] == {
        "uid": "uid-1",
        "namespace": "ns",
        "name": "claim",
        "state": "PrepareCompleted",
        "startedAt": "2026-05-01T12:00:00Z",
        "updatedAt": "2026-05-01T12:00:03Z",
        "devices": [
            {
                "poolName": "node-a",
                "deviceName": "channel-0",
                "requestNames": ["channel"],
                "cdiDeviceIDs": ["k8s.compute-domain.nvidia.com/claim=uid-1-channel-0"],
                "kind": "channel",
                "domainID": "cd-uid",
            }
        ],
        "status": {"allocation": {"devices": {"results": [{"device": "channel-0"}]}}},
        "resourceVersion": "42",
    }


def test_reformatting_the_file_keeps_it_valid() -> None:
    data = cpf.encode(_sample())
    compact = json.dumps(json.loads(data), separators=(",", ":"))
    assert cpf.decode(compact) == _sample()


def _tamper_value(data: bytes) -> bytes:
    doc = json.loads(data)
    doc["claims"]["uid-1"]["state"] = "PrepareStarted"
    return json.dumps(doc).encode()


def _resign(doc: dict[str, object]) -> bytes:
    doc.pop("checksum", None)
    doc["checksum"] = cpf._checksum(doc)
    return json.dumps(doc).encode()


def _unknown_field(data: bytes) -> bytes:
    doc = json.loads(data)
    doc["claims"]["uid-1"]["extra"] = 1
    return _resign(doc)


def _bad_state(data: bytes) -> bytes:
    doc = json.loads(data)
    doc["claims"]["uid-1"]["state"] = "Prepared"
    return _resign(doc)


def _naive_time(data: bytes) -> bytes:
    doc = json.loads(data)
    doc["claims"]["uid-1"]["startedAt"] = "2026-05-01T12:00:00"
    return _resign(doc)


def _future_version(data: bytes) -> bytes:
    doc = json.loads(data)
    doc["version"] = 4
    return _resign(doc)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda d: d[: len(d) // 2], cpf.CorruptionReason.INVALID_JSON),
        (lambda d: b"\xff\xfe", cpf.CorruptionReason.INVALID_JSON),
        (lambda d: b"[1, 2]", cpf.CorruptionReason.INVALID_LAYOUT),
        (_tamper_value, cpf.CorruptionReason.CHECKSUM_MISMATCH),
        (lambda d: d.replace(b'"checksum"', b'"checksun"'), cpf.CorruptionReason.CHECKSUM_MISMATCH),
        (_future_version, cpf.CorruptionReason.UNKNOWN_VERSION),
        (_unknown_field, cpf.CorruptionReason.INVALID_LAYOUT),
        (_bad_state, cpf.CorruptionReason.INVALID_LAYOUT),
        (_naive_time, cpf.CorruptionReason.INVALID_LAYOUT),
    ],
    ids=[
        "truncated",
        "not-utf8",
        "not-an-object",
        "value-changed",
        "checksum-missing",
        "future-version",
        "unknown-field",
        "unknown-state",
        "naive-timestamp",
    ],
)
def test_corruption_is_reported_with_a_reason(
    tmp_path: Path, damage: object, reason: cpf.CorruptionReason
) -> None:
    path = tmp_path / cpf.FILE_NAME
    assert callable(damage)
    path.write_bytes(damage(cpf.encode(_sample())))
    with pytest.raises(cpf.CheckpointCorruptError) as caught:
        cpf.load(path)
    assert caught.value.reason is reason
    assert caught.value.path == path
    assert isinstance(caught.value, errors.PermanentError)
    assert str(path) in str(caught.value)


def test_missing_file_loads_as_none(tmp_path: Path) -> None:
    assert cpf.load(tmp_path / "nope.json") is None


def test_with_and_without_claim_do_not_mutate() -> None:
    base = cp.Checkpoint(boot_id=BOOT)
    one = base.with_claim(_entry())
    assert base.claims == {}
    assert one.get("uid-1") == _entry()
    assert one.without_claim("uid-1").claims == {}
    assert one.without_claim("absent") == one


@pytest.mark.parametrize(
    ("stored_boot", "keeps_claims", "discarded"),
    [
        (BOOT, True, 0),
        ("", True, 0),
        (OTHER_BOOT, False, 2),
    ],
    ids=["same-boot", "unstamped-is-adopted", "reboot-resets"],
)
def test_open_for_boot(
    tmp_path: Path, stored_boot: str, keeps_claims: bool, discarded: int
) -> None:
    path = tmp_path / cpf.FILE_NAME
    stored = cp.Checkpoint(boot_id=stored_boot, claims=_sample().claims)
    cpf.save(path, stored)
    result = cpf.open_for_boot(path, BOOT)
    assert result.checkpoint.boot_id == BOOT
    assert (result.checkpoint.claims == _sample().claims) is keeps_claims
    assert len(result.discarded) == discarded
    assert result.previous_boot_id == stored_boot
    assert cpf.load(path) == result.checkpoint


def test_open_for_boot_creates_a_missing_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "dir" / cpf.FILE_NAME
    result = cpf.open_for_boot(path, BOOT)
    assert result.checkpoint == cp.Checkpoint(boot_id=BOOT)
    assert cpf.load(path) == cp.Checkpoint(boot_id=BOOT)


def test_open_for_boot_leaves_a_corrupt_file_alone_and_quarantine_moves_it(tmp_path: Path) -> None:
    path = tmp_path / cpf.FILE_NAME
    path.write_text("{not json")
    with pytest.raises(cpf.CheckpointCorruptError):
        cpf.open_for_boot(path, BOOT)
    assert path.read_text() == "{not json"
    moved = cpf.quarantine(path, now=T0)
    assert moved.name == "checkpoint.json.corrupt-20260501T120000.000000Z"
    assert moved.read_text() == "{not json"
    assert not path.exists()
    assert cpf.open_for_boot(path, BOOT).checkpoint == cp.Checkpoint(boot_id=BOOT)


def test_naive_timestamps_are_refused_on_encode() -> None:
    bad = dataclasses.replace(_entry(), started_at=T0.replace(tzinfo=None))
    with pytest.raises(ValueError, match="timezone"):
        cpf.encode(cp.Checkpoint(boot_id=BOOT).with_claim(bad))


def test_version_1_files_are_still_read() -> None:
    doc = json.loads(cpf.encode(_sample()))
    doc["version"] = 1
    for entry in doc["claims"].values():
        del entry["resourceVersion"]
    old = cpf.decode(_resign(doc))
    assert old.get("uid-1") == dataclasses.replace(_entry(), resource_version="")


def test_tombstones_round_trip_and_are_not_live() -> None:
    tomb = dataclasses.replace(_entry(), state=cp.ClaimState.UNPREPARED, devices=(), status={})
    back = cpf.decode(cpf.encode(cp.Checkpoint(boot_id=BOOT).with_claim(tomb)))
    assert back.get("uid-1") == tomb
    assert not tomb.state.live
    assert all(s.live for s in cp.ClaimState if s is not cp.ClaimState.UNPREPARED)


def _per_clique(uid: str = "uid-3") -> cp.ClaimEntry:
    return dataclasses.replace(_entry(uid), scope=sharedimex.Scope.PER_CLIQUE)


def test_a_per_clique_entry_is_written_as_version_3_with_every_scope() -> None:
    mixed = _sample().with_claim(_per_clique())
    doc = json.loads(cpf.encode(mixed))
    assert doc["version"] == 3
    assert {uid: e["scope"] for uid, e in doc["claims"].items()} == {
        "uid-1": "perDomain",
        "uid-2": "perDomain",
        "uid-3": "perClique",
    }
    assert cpf.decode(cpf.encode(mixed)) == mixed


def test_without_a_per_clique_entry_the_file_stays_version_2_for_older_readers() -> None:
    doc = json.loads(cpf.encode(_sample()))
    assert doc["version"] == 2
    assert all("scope" not in e for e in doc["claims"].values())


def test_entries_of_version_2_files_read_as_per_domain() -> None:
    old = cpf.decode(cpf.encode(_sample()))
    assert {e.scope for e in old.claims.values()} == {sharedimex.Scope.PER_DOMAIN}


@pytest.mark.parametrize(
    ("version", "scope"),
    [(2, "perClique"), (3, None), (3, "perWorld")],
    ids=["scope-in-version-2", "no-scope-in-version-3", "unknown-scope"],
)
def test_a_scope_that_does_not_fit_the_version_is_refused(version: int, scope: str | None) -> None:
    doc = json.loads(cpf.encode(cp.Checkpoint(boot_id=BOOT).with_claim(_per_clique())))
    doc["version"] = version
    entry = doc["claims"]["uid-3"]
    if scope is None:
        del entry["scope"]
    else:
        entry["scope"] = scope
    with pytest.raises(cpf.CheckpointCorruptError) as caught:
        cpf.decode(_resign(doc))
    assert caught.value.reason is cpf.CorruptionReason.INVALID_LAYOUT
