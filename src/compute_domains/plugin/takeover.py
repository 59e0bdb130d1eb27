"""Take over a node NVIDIA's v25.12 kubelet plugin served: its checkpoint and CDI specs become ours.

``take_over`` runs at every start, under the node lock, before our checkpoint is opened
(``DeviceState.open_for_boot``). When ``checkpoint.json`` is in NVIDIA's format
(``plugin.nvidia_checkpoint``) it is replaced by our format. Why adopting is safe and
unpreparing is not: docs/decisions/0004-taking-over-nvidia-checkpoints.md.

What each claim of NVIDIA's checkpoint becomes:
- ``PrepareCompleted`` with its claim CDI spec on the node: adopted as ``PrepareCompleted``
  with NVIDIA's devices and CDI IDs. Its pod runs with these devices, and a container restart
  resolves the same CDI IDs. The kubelet's NodeUnprepareResources later finds the claim and
  undoes it (node label reference, CDI spec) as it would one of ours.
- ``PrepareCompleted`` whose claim CDI spec is missing (a reboot empties ``/var/run/cdi``):
  ``PrepareStarted``. The CDI IDs that the kubelet still holds no longer resolve, so a prepare
  from the kubelet must redo the claim instead of returning them.
- ``PrepareStarted``: ``PrepareStarted`` with the devices its allocation plans, as our own
  prepare records them in its first step. No container has these devices: the kubelet starts
  containers only after a successful prepare. The start-up cleanup unprepares the claim when
  it is gone; otherwise a kubelet retry completes it or a kubelet unprepare removes it.

CDI: NVIDIA writes YAML (``<vendor>-claim_<uid>.yaml``, ``<vendor>-device_base.yaml``) and we
write JSON. Each claim spec is first renamed to our file name, so that at every moment exactly
one file defines its devices (CDI's Go library parses YAML whatever the extension). Then it is
atomically rewritten as JSON. NVIDIA's base spec is deleted, because ours defines the same
device (``device=all``), and two definitions in one folder make it unresolvable.

Crash safety: the order is backup (``checkpoint.json.nvidia-v25.12``), CDI specs, then our
checkpoint over NVIDIA's. A crash before the last step repeats the takeover at the next start,
and every step can be repeated. A damaged NVIDIA file is refused before anything is touched.
All IO here blocks; the async caller runs it in a worker thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import logging
from collections.abc import Mapping
from pathlib import Path

import yaml

from compute_domains.infra import atomicfile, errors
from compute_domains.plugin import (
    cdi,
    checkpoint,
    checkpointfile,
    configs,
    devices,
    edits,
    nvidia_checkpoint,
)

logger = logging.getLogger(__name__)

BACKUP_SUFFIX = ".nvidia-v25.12"
"""Appended to the checkpoint's file name for the copy of NVIDIA's file."""
NVIDIA_BASE_SPEC = f"{cdi.CDI_VENDOR}-device_base.yaml"
"""NVIDIA's base CDI spec file; ours (JSON) replaces it."""
_CLAIM_PREFIX, _YAML = f"{cdi.CDI_VENDOR}-claim_", ".yaml"
State = checkpoint.ClaimState


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Takeover:
    """What ``take_over`` did with NVIDIA's checkpoint."""

    checkpoint: checkpoint.Checkpoint
    """Our checkpoint as saved in place of NVIDIA's (unstamped; ``open_for_boot`` stamps it)."""
    backup: Path
    """Where NVIDIA's file was kept."""
    specs_converted: int
    """NVIDIA claim CDI specs rewritten as ours."""


def take_over(
    path: Path,
    *,
    cdi_root: Path,
    node: str,
    offered: Mapping[str, devices.Allocatable],
    now: datetime.datetime,
) -> Takeover | None:
    """Convert NVIDIA's checkpoint at ``path`` (and its CDI specs) to ours; None if not NVIDIA's.

    Args:
        path: the checkpoint file (``<plugin dir>/checkpoint.json``).
        cdi_root: the CDI spec folder both plugins write to.
        node: this node (our pool name; also for the logs).
        offered: the devices this node offers, to plan ``PrepareStarted`` claims.
        now: the time stamped on the converted entries.

    Raises:
        checkpointfile.CheckpointCorruptError: NVIDIA's format, but damaged (nothing was touched).
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = None
    claims = nvidia_checkpoint.decode(data, path=path) if data is not None else None
    # NVIDIA's CDI files are converted even without its checkpoint (wiped by hand): its base
    # spec would otherwise shadow ours, and the orphan cleanup only sees our file names.
    converted = migrate_cdi(cdi_root, node=node)
    if claims is None or data is None:
        return None
    backup = _backup(path, data, now)
    entries = [_convert(c, cdi_root=cdi_root, node=node, offered=offered, now=now) for c in claims]
    ours = checkpoint.Checkpoint(claims={e.uid: e for e in entries})
    checkpointfile.save(path, ours)
    adopted = sum(e.state is State.PREPARE_COMPLETED for e in entries)
    logger.info(
        "Took over %s %s: %d claims adopted as PrepareCompleted, %d as PrepareStarted, %d CDI "
        "specs converted; NVIDIA's file kept as %s",
        nvidia_checkpoint.FORMAT_NAME,
        path,
        adopted,
        len(entries) - adopted,
        converted,
        backup,
        extra={"node": node},
    )
    return Takeover(checkpoint=ours, backup=backup, specs_converted=converted)


def migrate_cdi(cdi_root: Path, *, node: str) -> int:
    """Rewrite NVIDIA's claim CDI specs as ours and delete its base spec; the number rewritten."""
    if not cdi_root.is_dir():
        return 0
    extra = {"node": node}
    moved = 0
    for spec in sorted(cdi_root.glob(f"{_CLAIM_PREFIX}*{_YAML}")):
        ours = cdi_root / cdi.claim_spec_file_name(spec.name[len(_CLAIM_PREFIX) : -len(_YAML)])
        try:
            doc = yaml.safe_load(spec.read_text())
            if not isinstance(doc, dict):
                raise ValueError("not a YAML mapping")
            text = json.dumps(doc, indent=2) + "\n"
        except (OSError, yaml.YAMLError, ValueError, TypeError) as err:
            logger.warning("left NVIDIA's CDI spec %s as it is: %s", spec, err, extra=extra)
            continue
        if ours.exists():  # ours already defines these devices: a second file is a conflict
            spec.unlink()
            continue
        spec.rename(ours)
        atomicfile.write_atomic(ours, text, mode=0o644)
        moved += 1
    with contextlib.suppress(FileNotFoundError):
        (cdi_root / NVIDIA_BASE_SPEC).unlink()
        logger.info(
            "removed NVIDIA's base CDI spec %s: ours replaces it", NVIDIA_BASE_SPEC, extra=extra
        )
    return moved


def _backup(path: Path, data: bytes, now: datetime.datetime) -> Path:
    """Keep NVIDIA's file next to ours; never overwrite a different earlier copy."""
    target = path.with_name(path.name + BACKUP_SUFFIX)
    try:
        existing: bytes | None = target.read_bytes()
    except FileNotFoundError:
        existing = None
    if existing == data:
        return target  # a repeated takeover (a crash before our checkpoint was saved)
    if existing is not None:
        stamp = now.astimezone(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        target = target.with_name(f"{target.name}.{stamp}")
    atomicfile.write_atomic(target, data, mode=0o600)
    return target


def _convert(
    claim: nvidia_checkpoint.NvidiaClaim,
    *,
    cdi_root: Path,
    node: str,
    offered: Mapping[str, devices.Allocatable],
    now: datetime.datetime,
) -> checkpoint.ClaimEntry:
    """Our entry for one NVIDIA claim (see the module docstring), with its log line."""
    state, found = State.PREPARE_STARTED, claim.devices
    if claim.state is State.PREPARE_COMPLETED:
        spec = cdi_root / cdi.claim_spec_file_name(claim.uid)
        needs_spec = any(
            i.startswith(f"{cdi.CLAIM_KIND}=") for d in found for i in d.cdi_device_ids
        )
        if needs_spec and not spec.exists():
            found = tuple(dataclasses.replace(d, cdi_device_ids=()) for d in found)
            why = "its CDI spec is gone (node rebooted?), so the kubelet's next prepare redoes it"
        else:
            state = State.PREPARE_COMPLETED
            why = "its pod keeps these devices; the kubelet's unprepare releases them"
    else:
        found = _planned(claim, node=node, offered=offered)
        why = "partly prepared: a kubelet retry completes it, the cleanup drops it once stale"
    names = ", ".join(f"{d.device_name} of ComputeDomain {d.domain_uid or '?'}" for d in found)
    logger.info(
        "Took over claim %s from NVIDIA's checkpoint: %s there, %s here (devices: %s): %s",
        claim.ref,
        claim.state.value,
        state.value,
        names or "none",
        why,
        extra={"node": node, "claim_uid": claim.uid},
    )
    return checkpoint.ClaimEntry(
        uid=claim.uid,
        namespace=claim.namespace,
        name=claim.name,
        state=state,
        started_at=now,
        updated_at=now,
        devices=found,
        status=claim.status,
    )


def _planned(
    claim: nvidia_checkpoint.NvidiaClaim, *, node: str, offered: Mapping[str, devices.Allocatable]
) -> tuple[checkpoint.PreparedDevice, ...]:
    """The devices our prepare would record for the claim; none if its allocation does not fit."""
    ours = configs.Claim(
        uid=claim.uid,
        namespace=claim.namespace,
        name=claim.name,
        resource_version="",
        status=claim.status,
    )
    try:
        return edits.planned_devices(configs.plan(ours, node=node, offered=offered))
    except errors.PermanentError:
        # The cleanup still judges the claim by name; a label it set is a stray label then.
        return ()
