"""CDI naming and version rules: kinds, device names, qualified names, the minimum ``cdiVersion``.

Rules (CDI library ``pkg/parser``, SPEC.md's released-versions table, v0.3.0 … v1.1.0):
- vendor and class (the two halves of ``kind``): start with a letter, end with a letter or a
  digit, letters, digits, ``_``, ``-`` and ``.`` inside; a dot in the class needs 0.6.0.
- device name: letters, digits, ``_``, ``-``, ``.`` and ``:``, starting and ending with a
  letter or digit; starting with a digit needs 0.5.0.
- A runtime rejects a ``cdiVersion`` it does not know, and one lower than what the spec's
  fields need (``minimum_version``); writers use the lowest version that covers their content
  because older runtimes reject newer version strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from compute_domains.infra.cdispec import model

KNOWN_VERSIONS = (
    *("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0"),
    *("1.0.0", "1.1.0"),
)
"""``cdiVersion`` strings a runtime of CDI 1.1 accepts (with or without a leading ``v``)."""

_VENDOR_OR_CLASS = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_DEVICE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


def check_kind(kind: str) -> str:
    """``kind`` when it is a valid ``<vendor>/<class>``; else ``CdiSpecError``."""
    vendor, slash, cls = kind.partition("/")
    if not slash or not _VENDOR_OR_CLASS.match(vendor) or not _VENDOR_OR_CLASS.match(cls):
        raise model.CdiSpecError(f"invalid CDI kind {kind!r} (want <vendor>/<class>)")
    return kind


def check_device_name(name: str) -> str:
    """``name`` when it is a valid CDI device name; else ``CdiSpecError``."""
    if not _DEVICE_NAME.match(name):
        raise model.CdiSpecError(f"invalid CDI device name {name!r}")
    return name


def qualified_name(kind: str, device: str) -> str:
    """``<vendor>/<class>=<device>`` after checking each part's syntax."""
    return f"{check_kind(kind)}={check_device_name(device)}"


def check_version(version: str) -> str:
    """The version without its optional leading ``v`` when a runtime knows it."""
    bare = version.removeprefix("v")
    if bare not in KNOWN_VERSIONS:
        raise model.CdiSpecError(f"invalid version {version!r}")
    return bare


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.5.0"`` → ``(0, 5, 0)`` for comparisons."""
    return tuple(int(p) for p in version.removeprefix("v").split("."))


def minimum_version(spec: model.Spec, *, raw: Mapping[str, Any] | None = None) -> str:
    """The lowest ``cdiVersion`` that covers what ``spec`` uses (``raw``: unmodelled fields)."""
    need = (0, 3, 0)
    edits = [spec.edits, *(d.edits for d in spec.devices)]
    if any(m.type for e in edits for m in e.mounts):
        need = max(need, (0, 4, 0))
    if any(n.host_path for e in edits for n in e.device_nodes):
        need = max(need, (0, 5, 0))
    if any(d.name[0].isdigit() for d in spec.devices):
        need = max(need, (0, 5, 0))
    if spec.annotations or any(d.annotations for d in spec.devices):
        need = max(need, (0, 6, 0))
    if "." in spec.kind.partition("/")[2]:
        need = max(need, (0, 6, 0))
    if any(e.additional_gids for e in edits):
        need = max(need, (0, 7, 0))
    if raw is not None:
        raw_edits = [raw.get("containerEdits") or {}]
        raw_edits += [d.get("containerEdits") or {} for d in raw.get("devices", [])]
        if any("intelRdt" in e for e in raw_edits):
            need = max(need, (0, 7, 0))
        if any("netDevices" in e for e in raw_edits):
            need = max(need, (1, 1, 0))
    return ".".join(str(p) for p in need)
