"""Read the checkpoint NVIDIA's v25.12 ComputeDomain kubelet plugin leaves on a node.

Its job: tell NVIDIA's file apart from ours and from a damaged file, verify it the way NVIDIA's
plugin does, and return its claims in our device model. ``plugin.takeover`` decides what each
claim becomes; nothing here writes.

The format (facts from NVIDIA's v25.12.0 release: the kubelet's ``checkpointmanager`` wrapping):
the same path as ours (``<plugin dir>/checkpoint.json``), the compact ``encoding/json`` output
of a Go struct whose fields are, in this order::

    {"checksum": <uint32 in a uint64>, "v1": {"preparedClaims": {<uid>: <v1 claim>}},
     "v2": {"checksum": <uint32>, "preparedClaims": {<uid>: <v2 claim>}}}

- a v2 claim is ``{"checkpointState": "PrepareStarted"|"PrepareCompleted", "status":
  <ResourceClaimStatus>, "preparedDevices": [<group>], "name": ..., "namespace": ...}``; only
  ``PrepareStarted`` entries carry ``name``/``namespace``, a completed one has neither;
- v1 lists the completed claims only, without a state (``{"status", "preparedDevices"}``);
  NVIDIA writes both and reads v2 when present (older releases wrote v1 alone);
- a group is ``{"devices": [{"channel"|"daemon": {"info": {"id": N}, "device": {"Requests",
  "PoolName", "DeviceName", "CDIDeviceIDs"}}}], "configState": {"Type", "ComputeDomain"}}``
  (the device keys are capitalised: that Go struct has no JSON tags);
- empty maps and absent pointers are left out (``omitempty``), so an empty checkpoint is
  ``{"checksum":N,"v1":{},"v2":{"checksum":M}}``.

Checksums (kubelet ``checkpointmanager/checksum``): FNV-1a 32-bit over the text that
``dump.ForHash`` (go-spew, ``%#v``) prints for the ``[]byte`` of ``json.Marshal`` of the object
with its checksum set to 0, i.e. ``([]uint8)[<each byte in decimal, space-separated>]``. The
top-level ``checksum`` covers ``{"checksum":0,"v1":...}`` (``v2`` left out); ``v2.checksum``
covers ``{"checksum":0,"preparedClaims":...}``. NVIDIA verifies both on every read.

We verify both on the member texts as they stand in the file (rebuilt in Go's field order with
the checksum zeroed), instead of re-marshalling the Kubernetes types in Python. That is exact
for a file NVIDIA's plugin wrote, since Go's output is deterministic; a file reformatted by hand
(indentation, reordered keys) fails the check here where NVIDIA's plugin, which re-marshals,
would accept it. Such a file is refused as corrupt, never guessed at.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compute_domains.infra import jsonshape
from compute_domains.plugin import checkpoint, checkpointfile

FORMAT_NAME = "NVIDIA's v25.12 kubelet-plugin checkpoint (kubelet checkpointmanager format)"
"""How messages and logs name this format."""

State = checkpoint.ClaimState
_STATES = {s.value: s for s in (State.PREPARE_STARTED, State.PREPARE_COMPLETED)}
_TOP_KEYS = {"checksum", "v1", "v2"}
_KINDS = ("channel", "daemon")
_WS = re.compile(r"[ \t\n\r]*")
_FNV_OFFSET, _FNV_PRIME = 0x811C9DC5, 0x01000193
Reason = checkpointfile.CorruptionReason


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NvidiaClaim:
    """One claim of NVIDIA's checkpoint, its devices in our model."""

    uid: str
    """The ResourceClaim UID."""
    state: checkpoint.ClaimState
    """``PREPARE_STARTED`` or ``PREPARE_COMPLETED`` (NVIDIA's two states have our names)."""
    namespace: str = ""
    """The claim's namespace; NVIDIA records it for ``PrepareStarted`` entries only."""
    name: str = ""
    """The claim's name; NVIDIA records it for ``PrepareStarted`` entries only."""
    status: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The ResourceClaim ``status`` NVIDIA stored, as plain JSON."""
    devices: tuple[checkpoint.PreparedDevice, ...] = ()
    """What NVIDIA handed to the kubelet (empty unless ``PREPARE_COMPLETED``)."""

    @property
    def ref(self) -> str:
        """``namespace/name (uid)``, or the UID alone when NVIDIA did not record the name."""
        return f"{self.namespace}/{self.name} ({self.uid})" if self.name else self.uid


def is_nvidia_layout(doc: object) -> bool:
    """Whether a parsed checkpoint has NVIDIA's top-level shape (ours always has ``version``)."""
    return isinstance(doc, dict) and "checksum" in doc and set(doc) <= _TOP_KEYS


def checksum(marshalled: bytes) -> int:
    """The kubelet checkpointmanager checksum of Go ``json.Marshal`` output ``marshalled``."""
    text = "([]uint8)[" + " ".join(str(b) for b in marshalled) + "]"
    value = _FNV_OFFSET
    for byte in text.encode("ascii"):
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


def decode(data: bytes, *, path: Path | None = None) -> tuple[NvidiaClaim, ...] | None:
    """NVIDIA's claims from checkpoint content; None when the content is not NVIDIA's layout.

    Raises:
        checkpointfile.CheckpointCorruptError: NVIDIA's layout, but a checksum does not match or
            the content does not fit the format.
    """
    try:
        text = data.decode()
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None  # not ours to judge: our own reader reports it as invalid JSON
    if not is_nvidia_layout(doc):
        return None
    try:
        members = _members(text)
        v1, v2 = _present(members.get("v1")), _present(members.get("v2"))
        _verify(doc["checksum"], _go_object([("checksum", "0"), ("v1", v1)]), "top-level")
        if v2 is None:  # written by a release before v2 existed: every claim is completed
            return _claims(doc.get("v1") or {}, v2=False)
        claims = _present(_members(v2).get("preparedClaims"), empty="{}")
        marshalled = _go_object([("checksum", "0"), ("preparedClaims", claims)])
        _verify(jsonshape.obj(doc["v2"]).get("checksum"), marshalled, "v2")
        return _claims(doc["v2"], v2=True)
    except _Mismatch as err:
        raise checkpointfile.CheckpointCorruptError(
            path, Reason.CHECKSUM_MISMATCH, f"{FORMAT_NAME}: {err}"
        ) from err
    except (KeyError, TypeError, ValueError) as err:
        detail = f"{FORMAT_NAME}, but {type(err).__name__}: {err}"
        raise checkpointfile.CheckpointCorruptError(path, Reason.INVALID_LAYOUT, detail) from err


class _Mismatch(Exception):
    """A stored checksum does not match the content."""


def _verify(stored: object, marshalled: str, which: str) -> None:
    if isinstance(stored, bool) or not isinstance(stored, int):
        raise TypeError(f"{which} checksum {stored!r} is not an unsigned integer")
    actual = checksum(marshalled.encode())
    if stored != actual:
        raise _Mismatch(f"{which} checksum: stored {stored}, content hashes to {actual}")


def _members(text: str) -> dict[str, str]:
    """The raw text of each member of the JSON object ``text`` (exact, whitespace-trimmed)."""
    decoder = json.JSONDecoder()
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        raise ValueError("expected a JSON object")
    i = _skip(text, i + 1)
    out: dict[str, str] = {}
    while text[i : i + 1] != "}":
        key, i = decoder.raw_decode(text, i)
        i = _skip(text, i)
        if text[i : i + 1] != ":":
            raise ValueError(f"expected ':' at offset {i}")
        start = _skip(text, i + 1)
        _value, i = decoder.raw_decode(text, start)
        out[str(key)] = text[start:i]
        i = _skip(text, i)
        if text[i : i + 1] == ",":
            i = _skip(text, i + 1)
    return out


def _skip(text: str, i: int) -> int:
    """The offset of the first non-whitespace character at or after ``i``."""
    found = _WS.match(text, i)
    return found.end() if found else i


def _present(raw: str | None, *, empty: str = "") -> str | None:
    """A member as Go marshals it: absent when null, or (for ``omitempty`` maps) when empty."""
    return None if raw is None or raw == "null" or (empty and raw == empty) else raw


def _go_object(fields: list[tuple[str, str | None]]) -> str:
    """Compact JSON object of the present fields, in the given (Go declaration) order."""
    return "{" + ",".join(f'"{k}":{v}' for k, v in fields if v is not None) + "}"


def _claims(raw: object, *, v2: bool) -> tuple[NvidiaClaim, ...]:
    claims = jsonshape.obj(jsonshape.obj(raw).get("preparedClaims") or {})
    if not v2 and any(isinstance(c, list) for c in claims.values()):
        # v25.3.0-rc.2 kept a claim as a bare list of device groups; v25.3.0 converted it
        raise ValueError("claims in the v25.3.0-rc.2 layout (lists of device groups)")
    return tuple(_claim(uid, jsonshape.obj(entry), v2=v2) for uid, entry in sorted(claims.items()))


def _claim(uid: str, raw: dict[str, Any], *, v2: bool) -> NvidiaClaim:
    state = State.PREPARE_COMPLETED
    if v2:
        name = raw.get("checkpointState")
        if name not in _STATES:
            known = ", ".join(_STATES)
            raise ValueError(f"claim {uid} has checkpointState {name!r}; this reader knows {known}")
        state = _STATES[str(name)]
    devices = tuple(
        device
        for group in jsonshape.array(raw.get("preparedDevices") or [])
        for device in _group(jsonshape.obj(group))
    )
    return NvidiaClaim(
        uid=uid,
        state=state,
        namespace=jsonshape.string(raw.get("namespace", "")),
        name=jsonshape.string(raw.get("name", "")),
        status=jsonshape.obj(raw.get("status") or {}),
        devices=devices,
    )


def _group(raw: dict[str, Any]) -> list[checkpoint.PreparedDevice]:
    config_state = jsonshape.obj(raw.get("configState") or {})
    domain_uid = jsonshape.string(config_state.get("ComputeDomain", ""))
    out = []
    for entry in jsonshape.array(raw.get("devices") or []):
        entry = jsonshape.obj(entry)
        kinds = [k for k in _KINDS if entry.get(k) is not None]
        if len(kinds) != 1:
            raise ValueError(f"a prepared device must be a channel or a daemon, got {entry!r}")
        device = jsonshape.obj(jsonshape.obj(entry[kinds[0]]).get("device"))
        out.append(
            checkpoint.PreparedDevice(
                pool_name=jsonshape.string(device["PoolName"]),
                device_name=jsonshape.string(device["DeviceName"]),
                request_names=tuple(
                    jsonshape.string(r) for r in jsonshape.array(device.get("Requests") or [])
                ),
                cdi_device_ids=tuple(
                    jsonshape.string(c) for c in jsonshape.array(device.get("CDIDeviceIDs") or [])
                ),
                kind=kinds[0],
                domain_uid=domain_uid,
            )
        )
    return out
