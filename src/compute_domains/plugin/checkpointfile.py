"""The checkpoint file: our versioned JSON format, its checksum, atomic load/save, boot-ID reset.

The checkpoint is the plugin's only record of what it prepared; it must survive crashes and must
never be trusted when damaged.

File format (our own; JSON, UTF-8, keys sorted, two-space indent)::

    {"checksum": "sha256:<hex>", "claims": {<uid>: <entry>, ...}, "nodeBootID": "...",
     "version": 2}

``checksum`` is the SHA-256 of the canonical JSON (sorted keys, no whitespace, UTF-8) of the whole
document without the ``checksum`` key. It is verified on the parsed document, so re-indenting the
file does not break it, but changing any value does.

Compatibility rules:
- We read versions 1, 2 and 3, and write the lowest version that covers the content (as
  ``cdi`` picks its ``cdiVersion``): 3 while an entry is in the ``perClique`` scope, else 2.
  Version 2 added the entry key ``resourceVersion`` (the claim's resourceVersion when it was
  prepared) and the state ``UnprepareCompleted`` (a tombstone that lets the plugin refuse a late
  prepare of a claim it already unprepared); a version 1 entry reads with an empty
  ``resourceVersion``. Version 3 (issue 26) added the entry key ``scope`` (``perDomain`` or
  ``perClique``, the claim's ComputeDomain's isolation scope); entries of versions 1 and 2 read
  as ``perDomain``. So a node that never served the per-clique scope keeps a file an older
  plugin reads (a downgrade works), and an older plugin refuses one that holds per-clique claims
  (``UNKNOWN_VERSION``) instead of taking them for per-domain ones.
- Any other version, invalid JSON, a wrong checksum or a document that does not fit the layout
  raises ``CheckpointCorruptError`` with a ``reason``; the caller quarantines the file
  (``quarantine``) or refuses to start.
- A future version must keep ``version`` at the top level so that this reader reports
  ``UNKNOWN_VERSION`` instead of guessing.
- NVIDIA's file at the same path (``checksum``, ``v1``, ``v2``) is not read here:
  ``plugin.takeover`` converts it to this format at start-up, before this reader sees it.

Invariants:
- Every write goes through ``infra.atomicfile.write_atomic`` (temp file, fsync, rename, dir fsync).
- A checkpoint belongs to one boot: ``open_for_boot`` keeps it when the stamped boot ID matches,
  adopts it when unstamped, and replaces it with an empty one when the node rebooted.
- All functions here do blocking file IO; async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compute_domains.api import sharedimex
from compute_domains.infra import atomicfile, errors, jsonshape
from compute_domains.plugin.checkpoint import Checkpoint, ClaimEntry, ClaimState, PreparedDevice

VERSION = 3
"""The highest checkpoint format version this module writes (``encode`` picks the lowest that
covers the content: 3 only while a ``perClique`` entry is in it)."""
_VERSION_WITHOUT_SCOPE = 2
READABLE_VERSIONS = (1, 2, 3)
"""Format versions this module reads."""

FILE_NAME = "checkpoint.json"
"""The checkpoint's file name inside the plugin directory."""


class CorruptionReason(enum.StrEnum):
    """Why a checkpoint file could not be trusted."""

    INVALID_JSON = "invalid-json"
    INVALID_LAYOUT = "invalid-layout"
    CHECKSUM_MISMATCH = "checksum-mismatch"
    UNKNOWN_VERSION = "unknown-version"


class CheckpointCorruptError(errors.PermanentError):
    """The checkpoint file is unreadable; the caller should quarantine it."""

    def __init__(self, path: Path | None, reason: CorruptionReason, detail: str) -> None:
        where = str(path) if path is not None else "checkpoint"
        super().__init__(f"{where} is corrupt ({reason}): {detail}")
        self.path = path
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BootCheck:
    """What ``open_for_boot`` found and did."""

    checkpoint: Checkpoint
    """The checkpoint to use from now on (already saved)."""
    discarded: tuple[ClaimEntry, ...] = ()
    """Claims dropped because they belonged to an earlier boot (for logging and cleanup)."""
    previous_boot_id: str = ""
    """The boot ID found in the file, or empty (missing file or unstamped)."""


def encode(checkpoint: Checkpoint) -> bytes:
    """The file content for ``checkpoint`` (deterministic: same model, same bytes)."""
    scoped = any(e.scope is not sharedimex.Scope.PER_DOMAIN for e in checkpoint.claims.values())
    version = VERSION if scoped else _VERSION_WITHOUT_SCOPE
    doc: dict[str, Any] = {
        "version": version,
        "nodeBootID": checkpoint.boot_id,
        "claims": {
            uid: _entry_to_json(e, with_scope=scoped) for uid, e in checkpoint.claims.items()
        },
    }
    doc["checksum"] = _checksum(doc)
    return (json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def decode(data: bytes | str, *, path: Path | None = None) -> Checkpoint:
    """Parse and verify checkpoint content.

    Raises:
        CheckpointCorruptError: bad JSON, unknown version, bad checksum or bad layout.
    """
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointCorruptError(path, CorruptionReason.INVALID_JSON, str(err)) from err
    if not isinstance(doc, dict):
        raise CheckpointCorruptError(path, CorruptionReason.INVALID_LAYOUT, "not a JSON object")
    version = doc.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        detail = f"version {version!r}, this reader knows {list(READABLE_VERSIONS)}"
        raise CheckpointCorruptError(path, CorruptionReason.UNKNOWN_VERSION, detail)
    stored = doc.pop("checksum", None)
    if stored != _checksum(doc):
        detail = f"stored {stored!r}, content hashes to {_checksum(doc)!r}"
        raise CheckpointCorruptError(path, CorruptionReason.CHECKSUM_MISMATCH, detail)
    try:
        _exact_keys(doc, {"version", "nodeBootID", "claims"}, "checkpoint")
        claims = {
            uid: _entry_from_json(uid, raw, version=int(version))
            for uid, raw in jsonshape.obj(doc["claims"]).items()
        }
        return Checkpoint(boot_id=jsonshape.string(doc["nodeBootID"]), claims=claims)
    except (KeyError, TypeError, ValueError) as err:
        detail = f"{type(err).__name__}: {err}"
        raise CheckpointCorruptError(path, CorruptionReason.INVALID_LAYOUT, detail) from err


def load(path: Path) -> Checkpoint | None:
    """Read the checkpoint at ``path``; None when the file does not exist.

    Raises:
        CheckpointCorruptError: the file exists but cannot be trusted.
        OSError: the file exists but cannot be read.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode(data, path=path)


def save(path: Path, checkpoint: Checkpoint) -> None:
    """Write ``checkpoint`` to ``path`` atomically and durably (mode 0600)."""
    atomicfile.write_atomic(path, encode(checkpoint), mode=0o600)


def open_for_boot(path: Path, boot_id: str) -> BootCheck:
    """Load the checkpoint for the current boot, resetting it after a reboot; always saves.

    Rules: missing file → new empty checkpoint; unstamped → stamp it, keep claims; same boot ID →
    keep; other boot ID → new empty checkpoint, old claims reported in ``discarded``.

    Raises:
        CheckpointCorruptError: the existing file cannot be trusted (not touched; quarantine it).
    """
    found = load(path)
    if found is None:
        result = BootCheck(checkpoint=Checkpoint(boot_id=boot_id))
    elif found.boot_id in ("", boot_id):
        kept = dataclasses.replace(found, boot_id=boot_id)
        result = BootCheck(checkpoint=kept, previous_boot_id=found.boot_id)
    else:
        result = BootCheck(
            checkpoint=Checkpoint(boot_id=boot_id),
            discarded=tuple(found.claims.values()),
            previous_boot_id=found.boot_id,
        )
    if found is None or found != result.checkpoint:
        save(path, result.checkpoint)
    return result


def quarantine(path: Path, *, now: datetime.datetime) -> Path:
    """Move a corrupt checkpoint aside to ``<name>.corrupt-<UTC time>`` and return the new path."""
    stamp = now.astimezone(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    path.rename(target)
    return target


def _checksum(doc: Mapping[str, Any]) -> str:
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def _entry_to_json(e: ClaimEntry, *, with_scope: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "uid": e.uid,
        "namespace": e.namespace,
        "name": e.name,
        "state": e.state.value,
        "startedAt": _time_to_json(e.started_at),
        "updatedAt": _time_to_json(e.updated_at),
        "devices": [_device_to_json(d) for d in e.devices],
        "status": dict(e.status),
        "resourceVersion": e.resource_version,
    }
    if with_scope:
        out["scope"] = e.scope.value
    return out


def _device_to_json(d: PreparedDevice) -> dict[str, Any]:
    return {
        "poolName": d.pool_name,
        "deviceName": d.device_name,
        "requestNames": list(d.request_names),
        "cdiDeviceIDs": list(d.cdi_device_ids),
        "kind": d.kind,
        "domainID": d.domain_uid,
    }


_ENTRY_KEYS_V1 = {
    "uid",
    "namespace",
    "name",
    "state",
    "startedAt",
    "updatedAt",
    "devices",
    "status",
}
_ENTRY_KEYS_V2 = {*_ENTRY_KEYS_V1, "resourceVersion"}
_ENTRY_KEYS = {*_ENTRY_KEYS_V2, "scope"}
_ENTRY_KEYS_BY_VERSION = {1: _ENTRY_KEYS_V1, 2: _ENTRY_KEYS_V2, 3: _ENTRY_KEYS}
_DEVICE_KEYS = {"poolName", "deviceName", "requestNames", "cdiDeviceIDs", "kind", "domainID"}


def _entry_from_json(uid: str, raw: object, *, version: int) -> ClaimEntry:
    obj = jsonshape.obj(raw)
    _exact_keys(obj, _ENTRY_KEYS_BY_VERSION[version], f"claim {uid}")
    if obj["uid"] != uid:
        raise ValueError(f"claim keyed {uid!r} has uid {obj['uid']!r}")
    return ClaimEntry(
        uid=uid,
        namespace=jsonshape.string(obj["namespace"]),
        name=jsonshape.string(obj["name"]),
        state=ClaimState(obj["state"]),
        started_at=_time_from_json(obj["startedAt"]),
        updated_at=_time_from_json(obj["updatedAt"]),
        devices=tuple(_device_from_json(d) for d in jsonshape.array(obj["devices"])),
        status=jsonshape.obj(obj["status"]),
        resource_version=jsonshape.string(obj.get("resourceVersion", "")),
        scope=sharedimex.Scope(jsonshape.string(obj.get("scope", sharedimex.Scope.PER_DOMAIN))),
    )


def _device_from_json(raw: object) -> PreparedDevice:
    obj = jsonshape.obj(raw)
    _exact_keys(obj, _DEVICE_KEYS, "device")
    return PreparedDevice(
        pool_name=jsonshape.string(obj["poolName"]),
        device_name=jsonshape.string(obj["deviceName"]),
        request_names=tuple(jsonshape.string(s) for s in jsonshape.array(obj["requestNames"])),
        cdi_device_ids=tuple(jsonshape.string(s) for s in jsonshape.array(obj["cdiDeviceIDs"])),
        kind=jsonshape.string(obj["kind"]),
        domain_uid=jsonshape.string(obj["domainID"]),
    )


def _time_to_json(t: datetime.datetime) -> str:
    if t.tzinfo is None:
        raise ValueError(f"checkpoint timestamps must be timezone-aware, got {t!r}")
    return t.astimezone(datetime.UTC).isoformat().replace("+00:00", "Z")


def _time_from_json(raw: object) -> datetime.datetime:
    t = datetime.datetime.fromisoformat(jsonshape.string(raw))
    if t.tzinfo is None:
        raise ValueError(f"timestamp {raw!r} has no timezone")
    return t


def _exact_keys(obj: Mapping[str, Any], keys: set[str], what: str) -> None:
    if set(obj) != keys:
        missing, extra = sorted(keys - set(obj)), sorted(set(obj) - keys)
        raise ValueError(f"{what}: missing keys {missing}, unknown keys {extra}")
