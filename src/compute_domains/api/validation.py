"""Pure validation of ComputeDomain specs: every problem found, as field errors.

Decoding (``ComputeDomainSpec.from_dict``) stops at the first wrong type; validation instead walks
the raw wire object and reports *all* problems, each with its dotted path, the way the API server
lists field errors. It checks what the CRD schema enforces (required fields, types, ``numNodes >=
0``, the allocation-mode enum) plus what upstream's schema lacks and we add: the template name
must be a DNS subdomain (it names a ResourceClaimTemplate) and unknown fields are reported.

The DNS-subdomain rule lives here once; ``crds`` builds the schema's ``pattern``/``maxLength``
from these constants, so the CRD and this module cannot disagree.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Final

from compute_domains.api import _wire
from compute_domains.api.computedomain import AllocationMode, ComputeDomainSpec

DNS_SUBDOMAIN_MAX_LENGTH: Final = 253
"""Longest allowed object name (RFC 1123 subdomain)."""
_DNS_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN_REGEX: Final = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
"""Unanchored RFC 1123 subdomain expression (match it whole)."""
DNS_SUBDOMAIN_PATTERN: Final = f"^{DNS_SUBDOMAIN_REGEX}$"
"""The anchored form, for an OpenAPI ``pattern``."""
_DNS_SUBDOMAIN: Final = re.compile(DNS_SUBDOMAIN_REGEX)

_SPEC_FIELDS: Final = frozenset({"numNodes", "channel"})
_CHANNEL_FIELDS: Final = frozenset({"resourceClaimTemplate", "allocationMode"})
_RCT_FIELDS: Final = frozenset({"name"})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FieldError:
    """One problem with one field."""

    path: str
    """Dotted wire path, e.g. ``spec.channel.resourceClaimTemplate.name``."""
    message: str
    """What is wrong, for a person."""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def dns_subdomain_problems(value: str) -> list[str]:
    """Why ``value`` is not a valid RFC 1123 subdomain (empty list when it is)."""
    if not value:
        return ["must not be empty"]
    problems = []
    if len(value) > DNS_SUBDOMAIN_MAX_LENGTH:
        problems.append(f"must be no more than {DNS_SUBDOMAIN_MAX_LENGTH} characters")
    if _DNS_SUBDOMAIN.fullmatch(value) is None:
        problems.append(
            f'invalid value "{value}": a DNS subdomain has only lowercase letters, digits, '
            "'-' and '.', and starts and ends with a letter or digit"
        )
    return problems


def validate_spec(spec: ComputeDomainSpec) -> list[FieldError]:
    """All field errors of a decoded spec (the checks of ``validate_spec_dict``)."""
    return validate_spec_dict(spec.to_dict())


def validate_computedomain(obj: Mapping[str, object]) -> list[FieldError]:
    """All field errors of a ComputeDomain object's ``spec``; a missing spec is one error."""
    if obj.get("spec") is None:
        return [FieldError(path="spec", message="required field missing")]
    return validate_spec_dict(obj["spec"])


def validate_spec_dict(spec: object, path: str = "spec") -> list[FieldError]:
    """All field errors of a spec in wire form, in document order."""
    errors: list[FieldError] = []
    obj = _object(spec, path, errors)
    if obj is None:
        return errors
    _unknown(obj, _SPEC_FIELDS, path, errors)
    num_nodes = obj.get("numNodes")
    if num_nodes is not None:
        nn_path = _wire.join(path, "numNodes")
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int):
            errors.append(_type_error(nn_path, "integer", num_nodes))
        elif num_nodes < 0:
            errors.append(FieldError(path=nn_path, message=f"must be >= 0, got {num_nodes}"))
    channel = _required_object(obj, "channel", path, errors)
    if channel is None:
        return errors
    channel_path = _wire.join(path, "channel")
    _unknown(channel, _CHANNEL_FIELDS, channel_path, errors)
    _check_allocation_mode(channel.get("allocationMode"), channel_path, errors)
    rct = _required_object(channel, "resourceClaimTemplate", channel_path, errors)
    if rct is None:
        return errors
    rct_path = _wire.join(channel_path, "resourceClaimTemplate")
    _unknown(rct, _RCT_FIELDS, rct_path, errors)
    name_path = _wire.join(rct_path, "name")
    name = rct.get("name")
    if name is None:
        errors.append(FieldError(path=name_path, message="required field missing"))
    elif not isinstance(name, str):
        errors.append(_type_error(name_path, "string", name))
    else:
        errors.extend(FieldError(path=name_path, message=p) for p in dns_subdomain_problems(name))
    return errors


def _check_allocation_mode(mode: object, channel_path: str, errors: list[FieldError]) -> None:
    if mode is None or mode == "":
        return
    mode_path = _wire.join(channel_path, "allocationMode")
    if not isinstance(mode, str):
        errors.append(_type_error(mode_path, "string", mode))
    elif mode not in {m.value for m in AllocationMode}:
        supported = ", ".join(f'"{m.value}"' for m in AllocationMode)
        message = f'unsupported value "{mode}": supported values: {supported}'
        errors.append(FieldError(path=mode_path, message=message))


def _type_error(path: str, expected: str, value: object) -> FieldError:
    return FieldError(path=path, message=f"expected {expected}, got {_wire.json_type(value)}")


def _object(value: object, path: str, errors: list[FieldError]) -> Mapping[str, object] | None:
    if not isinstance(value, Mapping):
        errors.append(_type_error(path, "object", value))
        return None
    return value


def _required_object(
    obj: Mapping[str, object], key: str, path: str, errors: list[FieldError]
) -> Mapping[str, object] | None:
    value = obj.get(key)
    if value is None:
        errors.append(FieldError(path=_wire.join(path, key), message="required field missing"))
        return None
    return _object(value, _wire.join(path, key), errors)


def _unknown(
    obj: Mapping[str, object], known: frozenset[str], path: str, errors: list[FieldError]
) -> None:
    errors.extend(
        FieldError(path=_wire.join(path, key), message=f'unknown field "{_wire.join(path, key)}"')
        for key in obj
        if key not in known
    )
