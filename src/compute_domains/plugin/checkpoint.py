"""The checkpoint's model: every claim this node prepared, as immutable typed records.

The checkpoint is the plugin's only record of what it prepared; ``state.DeviceState`` owns it
and changes it only inside a locked transaction. The model is immutable: ``with_claim`` and
``without_claim`` return new checkpoints. The file format, its compatibility rules and the
boot-ID reset are ``checkpointfile``'s.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Mapping
from typing import Any

from compute_domains.api import sharedimex


class ClaimState(enum.StrEnum):
    """Where a claim is in the prepare state machine."""

    PREPARE_STARTED = "PrepareStarted"
    """Prepare began; side effects may be partly done. A retry redoes everything."""
    PREPARE_COMPLETED = "PrepareCompleted"
    """Prepare finished; ``devices`` is what the kubelet was given. Prepare again is a no-op."""
    PREPARE_ABORTED = "PrepareAborted"
    """Prepare failed permanently; its side effects still need undoing by unprepare/cleanup."""
    UNPREPARED = "UnprepareCompleted"
    """Unprepare finished: a tombstone without devices. A prepare of the same claim version
    (same ``resource_version``) is refused; the entry expires after a while."""

    @property
    def live(self) -> bool:
        """Whether the claim may still hold side effects (label, CDI spec) on this node."""
        return self is not ClaimState.UNPREPARED


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PreparedDevice:
    """One device handed to the kubelet for a claim (the wire ``Device`` plus our bookkeeping)."""

    pool_name: str
    """The allocated device's pool."""
    device_name: str
    """The allocated device's name in its pool (e.g. ``channel-0``, ``daemon-0``)."""
    request_names: tuple[str, ...] = ()
    """The claim requests this device serves; empty means all."""
    cdi_device_ids: tuple[str, ...] = ()
    """Fully-qualified CDI device names returned to the kubelet, in order."""
    kind: str = ""
    """Our device type (``channel`` or ``daemon``); empty when unknown."""
    domain_uid: str = ""
    """UID of the ComputeDomain this device was prepared for; empty when none."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ClaimEntry:
    """The checkpoint record of one claim."""

    uid: str
    """The ResourceClaim UID (the checkpoint key)."""
    namespace: str
    """The claim's namespace."""
    name: str
    """The claim's name."""
    state: ClaimState
    """Where the claim is in the prepare state machine."""
    started_at: datetime.datetime
    """When the current prepare attempt began (UTC, timezone-aware)."""
    updated_at: datetime.datetime
    """When this entry last changed (UTC, timezone-aware)."""
    devices: tuple[PreparedDevice, ...] = ()
    """The prepared devices; complete only in ``PREPARE_COMPLETED``."""
    status: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Snapshot of the ResourceClaim ``status`` (allocation) as plain JSON; opaque here."""
    resource_version: str = ""
    """The claim's ``metadata.resourceVersion`` when it was prepared; empty when unknown."""
    scope: sharedimex.Scope = sharedimex.Scope.PER_DOMAIN
    """The isolation scope of the claim's ComputeDomain, fixed at its first prepare here: a
    ``perClique`` entry holds a channel of the clique's shared IMEX domain and no node label
    (``holder``). Entries written before the scope existed read as ``perDomain``."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Checkpoint:
    """All prepared claims on this node, stamped with the boot they belong to."""

    boot_id: str = ""
    """The kernel boot ID this checkpoint belongs to; empty when unstamped."""
    claims: Mapping[str, ClaimEntry] = dataclasses.field(default_factory=dict)
    """Claim entries keyed by claim UID."""

    def get(self, uid: str) -> ClaimEntry | None:
        """The entry of claim ``uid``, or None."""
        return self.claims.get(uid)

    def with_claim(self, entry: ClaimEntry) -> Checkpoint:
        """A copy with ``entry`` added or replaced (keyed by its UID)."""
        return dataclasses.replace(self, claims={**self.claims, entry.uid: entry})

    def without_claim(self, uid: str) -> Checkpoint:
        """A copy without claim ``uid`` (unchanged content if it was absent)."""
        return dataclasses.replace(self, claims={k: v for k, v in self.claims.items() if k != uid})
