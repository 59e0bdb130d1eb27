"""Helm's stored record of a release, read and changed as helm itself stores it (pure rules).

Helm 3 keeps each revision of a release in a Secret of type ``helm.sh/release.v1`` named
``sh.helm.release.v1.<release>.v<revision>`` in the release namespace, labelled ``owner=helm``,
``name=<release>``, ``status=deployed`` (the live one) and ``version=<revision>``. Its
``release`` key holds the release as JSON, gzip-compressed and base64-encoded (inside the
Secret's own base64). Two of the JSON's fields matter here:

* ``config``: the values the user gave (``--set``, ``-f``), without the chart's defaults;
* ``manifest``: the rendered objects, YAML documents separated by ``---``. ``helm uninstall``
  deletes every object listed there, except those whose *listed* annotations include
  ``helm.sh/resource-policy: keep``: helm looks at the record, not at the live object.

:func:`keep` marks one listed object kept, which is what the migration needs for the daemons'
ServiceAccount (docs/decisions/0021).
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import yaml

SECRET_TYPE: Final = "helm.sh/release.v1"
KEEP_ANNOTATION: Final = "helm.sh/resource-policy"
_GZIP_MAGIC: Final = b"\x1f\x8b\x08"
_SEPARATOR: Final = re.compile(r"(?m)^---[ \t]*$")


class ReleaseError(ValueError):
    """The record cannot be read or does not list what was asked for."""


def decode(data: str) -> dict[str, Any]:
    """The release in a Secret's ``data.release`` (as the API returns it, base64 once more).

    Raises:
        ReleaseError: not a helm 3 release record.
    """
    try:
        raw = base64.b64decode(base64.b64decode(data))
        if raw.startswith(_GZIP_MAGIC):
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except (ValueError, OSError) as err:
        raise ReleaseError(f"not a helm release record: {err}") from err
    if not isinstance(doc, dict) or not isinstance(doc.get("manifest"), str):
        raise ReleaseError("not a helm release record: no manifest")
    return doc


def encode(release: Mapping[str, Any]) -> str:
    """``release`` as a Secret's ``data.release``: JSON, gzip, base64, as helm writes it."""
    raw = gzip.compress(json.dumps(release, separators=(",", ":")).encode())
    return base64.b64encode(base64.b64encode(raw)).decode()


def _documents(manifest: str) -> list[str]:
    return _SEPARATOR.split(manifest)


def _is(doc: Any, kind: str, name: str) -> bool:
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    return isinstance(meta, dict) and doc.get("kind") == kind and meta.get("name") == name


def keep(release: Mapping[str, Any], kind: str, name: str) -> tuple[dict[str, Any], bool]:
    """``release`` with object ``kind``/``name`` of its manifest annotated to be kept by
    ``helm uninstall``; the flag says whether anything changed (False: it was kept already).

    Raises:
        ReleaseError: the manifest lists no such object.
    """
    parts = _documents(str(release["manifest"]))
    found = changed = False
    for i, text in enumerate(parts):
        doc = yaml.safe_load(text)
        if not _is(doc, kind, name):
            continue
        found = True
        annotations = doc["metadata"].get("annotations") or {}
        if annotations.get(KEEP_ANNOTATION) == "keep":
            continue
        doc["metadata"]["annotations"] = {**annotations, KEEP_ANNOTATION: "keep"}
        comments = "".join(
            f"{line}\n" for line in text.strip("\n").splitlines() if line.startswith("#")
        )
        parts[i] = f"\n{comments}{yaml.safe_dump(doc, sort_keys=False)}"
        changed = True
    if not found:
        raise ReleaseError(f"release {release.get('name')!r} lists no {kind} {name!r}")
    return {**release, "manifest": "---".join(parts)}, changed


def kept(release: Mapping[str, Any], kind: str, name: str) -> bool:
    """Whether the manifest lists ``kind``/``name`` with the keep annotation."""
    for text in _documents(str(release["manifest"])):
        doc = yaml.safe_load(text)
        if _is(doc, kind, name):
            return (doc["metadata"].get("annotations") or {}).get(KEEP_ANNOTATION) == "keep"
    return False


def _flat(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            yield from _flat(f"{prefix}.{key}" if prefix else str(key), inner)
    else:
        yield prefix, value


def user_values(release: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The values the user gave the release, as (dotted key, value) in the record's order."""
    config = release.get("config") or {}
    return list(_flat("", config)) if isinstance(config, dict) else []
