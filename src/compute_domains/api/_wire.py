"""Typed reading of decoded JSON objects: the one place where wire values are type-checked.

The models in this package decode what the API server or a claim's opaque parameters hand us.
Every field read goes through these helpers, so a wrong type, a missing required field or (where
the caller asks for strictness) an unknown field yields a ``DecodeError`` whose message names the
field by its dotted wire path (``spec.channel.resourceClaimTemplate.name``).

Invariants:
- ``null`` reads as "absent", as Go's ``encoding/json`` treats it for non-pointer fields.
- Booleans are never accepted as integers and floats never as integers, even ``1.0``
  (Go rejects both when decoding into an ``int``).
- ``loads_strict`` rejects duplicate object keys at every depth; Python's ``json`` would silently
  keep the last one. ``loads_marking`` parses a whole API object instead, keeping the last value
  as everyone does but marking each object that repeated a key (``MarkedObject``), so a decoder
  can reject duplicates in the part it owns (our driver's opaque parameters) and only there.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Collection, Mapping
from typing import TypeVar, cast

from lightkube.models.meta_v1 import ObjectMeta

from compute_domains.infra import errors


class DecodeError(errors.PermanentError):
    """A wire object does not have the shape its model requires; retrying cannot help."""


E = TypeVar("E", bound=enum.StrEnum)


def json_type(value: object) -> str:
    """The JSON type name of a decoded value, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def join(path: str, key: str) -> str:
    """The dotted wire path of ``key`` inside the object at ``path`` ("" is the root)."""
    return f"{path}.{key}" if path else key


def _duplicate(path: str) -> DecodeError:
    # Go's strict decoder (sigs.k8s.io/json) says "duplicate field"; k8s prefixes its phrase.
    return DecodeError(f'strict decoding error: duplicate field "{path}"')


def _reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise _duplicate(key)
        result[key] = value
    return result


class MarkedObject(dict[str, object]):
    """A JSON object from ``loads_marking``: last value wins, repeated keys are remembered."""

    __slots__ = ("repeated",)

    def __init__(self, pairs: list[tuple[str, object]]) -> None:
        super().__init__(pairs)
        seen: set[str] = set()
        repeated: list[str] = []
        for key, _ in pairs:
            if key in seen:
                repeated.append(key)
            seen.add(key)
        self.repeated = tuple(repeated)
        """Keys the document gave more than once, in document order."""


def loads_marking(raw: bytes) -> object:
    """Parse JSON text as ``json`` does (last value wins), every object a ``MarkedObject``.

    Raises:
        DecodeError: the text is not one well-formed UTF-8 JSON document.
    """
    try:
        return cast(object, json.loads(raw.decode("utf-8"), object_pairs_hook=MarkedObject))
    except UnicodeDecodeError as err:
        raise DecodeError(f"invalid UTF-8: {err}") from err
    except json.JSONDecodeError as err:
        raise DecodeError(f"invalid JSON: {err}") from err


def reject_repeated(value: object, path: str) -> None:
    """Raise for the first key repeated in ``value`` or below (only ``MarkedObject`` knows)."""
    if isinstance(value, MarkedObject) and value.repeated:
        raise _duplicate(join(path, value.repeated[0]))
    if isinstance(value, Mapping):
        for key, item in value.items():
            reject_repeated(item, join(path, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            reject_repeated(item, f"{path}[{index}]")


def loads_strict(raw: bytes | str) -> object:
    """Parse JSON text, rejecting duplicate keys, invalid UTF-8 and malformed documents.

    Raises:
        DecodeError: the text is not one well-formed JSON document with unique keys.
    """
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        return cast(object, json.loads(text, object_pairs_hook=_reject_duplicates))
    except UnicodeDecodeError as err:
        raise DecodeError(f"invalid UTF-8: {err}") from err
    except json.JSONDecodeError as err:
        raise DecodeError(f"invalid JSON: {err}") from err


def as_object(value: object, path: str) -> Mapping[str, object]:
    """``value`` as a JSON object, or a DecodeError naming ``path``."""
    if not isinstance(value, Mapping):
        where = path or "document"
        raise DecodeError(f"{where}: expected object, got {json_type(value)}")
    return cast(Mapping[str, object], value)


def reject_unknown(obj: Mapping[str, object], known: Collection[str], path: str) -> None:
    """Raise for the first key of ``obj`` (in document order) that is not in ``known``."""
    for key in obj:
        if key not in known:
            # Go's strict decoder words it this way; NVIDIA's tests grep for the whole phrase.
            raise DecodeError(f'strict decoding error: unknown field "{join(path, key)}"')


def opt_str(obj: Mapping[str, object], key: str, path: str) -> str | None:
    """The string at ``key``, or None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DecodeError(f"{join(path, key)}: expected string, got {json_type(value)}")
    return value


def req_str(obj: Mapping[str, object], key: str, path: str) -> str:
    """The string at ``key``; absence is an error (the empty string is allowed)."""
    value = opt_str(obj, key, path)
    if value is None:
        raise DecodeError(f"{join(path, key)}: required field missing")
    return value


def opt_int(obj: Mapping[str, object], key: str, path: str) -> int | None:
    """The integer at ``key``, or None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecodeError(f"{join(path, key)}: expected integer, got {json_type(value)}")
    return value


def opt_enum(obj: Mapping[str, object], key: str, path: str, kind: type[E]) -> E | None:
    """The member of the string enum ``kind`` named by ``key``; None when absent, null or ""."""
    value = opt_str(obj, key, path)
    if not value:
        return None
    try:
        return kind(value)
    except ValueError as err:
        supported = ", ".join(f'"{member.value}"' for member in kind)
        raise DecodeError(
            f'{join(path, key)}: unsupported value "{value}": supported values: {supported}'
        ) from err


def opt_object(obj: Mapping[str, object], key: str, path: str) -> Mapping[str, object] | None:
    """The object at ``key``, or None when absent or null."""
    value = obj.get(key)
    if value is None:
        return None
    return as_object(value, join(path, key))


def req_object(obj: Mapping[str, object], key: str, path: str) -> Mapping[str, object]:
    """The object at ``key``; absence is an error."""
    value = opt_object(obj, key, path)
    if value is None:
        raise DecodeError(f"{join(path, key)}: required field missing")
    return value


def opt_list(obj: Mapping[str, object], key: str, path: str) -> list[object]:
    """The array at ``key``; absent or null reads as empty."""
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise DecodeError(f"{join(path, key)}: expected array, got {json_type(value)}")
    return list(value)


def check_type_meta(data: Mapping[str, object], api_version: str, kind: str) -> None:
    """Reject an object whose ``apiVersion`` or ``kind`` names another type (absent is fine)."""
    actual_version = opt_str(data, "apiVersion", "")
    if actual_version is not None and actual_version != api_version:
        raise DecodeError(f'{kind}: unsupported apiVersion "{actual_version}"')
    actual_kind = opt_str(data, "kind", "")
    if actual_kind is not None and actual_kind != kind:
        raise DecodeError(f'expected kind "{kind}", got "{actual_kind}"')


def object_meta(obj: Mapping[str, object]) -> ObjectMeta:
    """The typed ``metadata`` of a Kubernetes object (empty when absent)."""
    raw = obj.get("metadata")
    if isinstance(raw, ObjectMeta):
        return raw
    meta = as_object({} if raw is None else raw, "metadata")
    try:
        return cast(ObjectMeta, ObjectMeta.from_dict(dict(meta)))
    except ValueError as err:  # lightkube's msgspec models raise ValidationError(ValueError)
        raise DecodeError(f"metadata: {err}") from err
