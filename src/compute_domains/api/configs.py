"""Opaque claim configs (channel and daemon): strict decoding by apiVersion/kind, with defaults.

The controller embeds one of these in each generated ResourceClaimTemplate
(``opaque.parameters``); the kubelet plugin decodes it when preparing a claim. Anything a user
or a stale template got wrong must fail the claim *permanently* with a message a person can act
on, because the kubelet shows it verbatim in a pod event. Decoding is therefore strict:
- the document must be one JSON object with unique keys (duplicates are rejected, not "last wins",
  as NVIDIA's strict decoder does). The API server keeps a claim's opaque parameters byte for
  byte, repeated keys included, but any JSON decoder keeps only the last: so the plugin reads the
  claim's bytes and parses them with ``parse_marking``, whose objects remember repeated keys, and
  ``decode`` rejects them; a plain mapping carries no such mark;
- ``apiVersion`` and ``kind`` are required and dispatched through an explicit table;
- an unknown field fails with ``strict decoding error: unknown field "<name>"`` (Go's phrase);
- wrong types and a missing or empty ``domainID`` fail;
- ``allocationMode`` defaults to ``Single`` when absent, null or empty; any other value than
  ``Single``/``All`` fails (a deliberate tightening: upstream quietly treats a typo as ``Single``).
Every failure is a ``DecodeError``, which is an ``infra.errors.PermanentError``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Final, Self

from compute_domains.api import _wire, names
from compute_domains.api.computedomain import AllocationMode

DecodeError = _wire.DecodeError
"""Raised for every malformed config; a ``PermanentError``."""


def _domain_uid(data: Mapping[str, object]) -> str:
    domain_uid = _wire.req_str(data, "domainID", "")
    if not domain_uid:
        raise DecodeError("domainID: must not be empty")
    return domain_uid


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ComputeDomainChannelConfig:
    """Config of a workload (channel) claim: which CD, and which channels to inject."""

    KIND: ClassVar[str] = names.CHANNEL_CONFIG_KIND

    domain_uid: str
    """UID of the ComputeDomain the claim belongs to."""
    allocation_mode: AllocationMode = AllocationMode.SINGLE
    """``Single``: channel 0 only; ``All``: every channel of the node."""

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Self:
        """Strictly decode the fields (apiVersion/kind are checked by ``decode``)."""
        _wire.reject_unknown(data, ("apiVersion", "kind", "domainID", "allocationMode"), "")
        mode = _wire.opt_enum(data, "allocationMode", "", AllocationMode)
        return cls(domain_uid=_domain_uid(data), allocation_mode=mode or AllocationMode.SINGLE)

    def to_dict(self) -> dict[str, Any]:
        """Encode to wire form, as the controller embeds it in the workload template."""
        return {
            "apiVersion": names.API_VERSION,
            "kind": self.KIND,
            "domainID": self.domain_uid,
            "allocationMode": self.allocation_mode.value,
        }


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ComputeDomainDaemonConfig:
    """Config of a daemon claim: which CD the daemon serves."""

    KIND: ClassVar[str] = names.DAEMON_CONFIG_KIND

    domain_uid: str
    """UID of the ComputeDomain the daemon serves."""

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Self:
        """Strictly decode the fields (apiVersion/kind are checked by ``decode``)."""
        _wire.reject_unknown(data, ("apiVersion", "kind", "domainID"), "")
        return cls(domain_uid=_domain_uid(data))

    def to_dict(self) -> dict[str, Any]:
        """Encode to wire form, as the controller embeds it in the daemon template."""
        return {"apiVersion": names.API_VERSION, "kind": self.KIND, "domainID": self.domain_uid}


OpaqueConfig = ComputeDomainChannelConfig | ComputeDomainDaemonConfig
"""Any config this driver understands."""

_DECODERS: Final[Mapping[tuple[str, str], Callable[[Mapping[str, object]], OpaqueConfig]]] = (
    MappingProxyType(
        {
            (names.API_VERSION, names.CHANNEL_CONFIG_KIND): ComputeDomainChannelConfig.from_dict,
            (names.API_VERSION, names.DAEMON_CONFIG_KIND): ComputeDomainDaemonConfig.from_dict,
        }
    )
)
"""The dispatch table: (apiVersion, kind) → strict decoder. Read-only."""


def parse_marking(raw: bytes) -> Mapping[str, object]:
    """An API object's JSON (a ResourceClaim as the API server sent it), each object marked
    with the keys it repeated, so that ``decode`` of its opaque parameters rejects them.

    Raises:
        DecodeError: the text is not one JSON object.
    """
    return _wire.as_object(_wire.loads_marking(raw), "")


def decode(raw: bytes | str | Mapping[str, object]) -> OpaqueConfig:
    """Strictly decode an opaque config from JSON text or an already-parsed object.

    Duplicate keys are detected in text, and in a mapping that ``parse_marking`` produced.

    Raises:
        DecodeError: the config is malformed; the message says how.
    """
    data = raw if isinstance(raw, Mapping) else _wire.loads_strict(raw)
    try:
        _wire.reject_repeated(data, "")
        obj = _wire.as_object(data, "")
        api_version = _wire.req_str(obj, "apiVersion", "")
        kind = _wire.req_str(obj, "kind", "")
    except DecodeError as err:
        raise DecodeError(f"invalid opaque config: {err}") from err
    decoder = _DECODERS.get((api_version, kind))
    if decoder is None:
        known_versions = {version for version, _ in _DECODERS}
        problem = (
            f'unknown kind "{kind}"'
            if api_version in known_versions
            else f'unsupported apiVersion "{api_version}"'
        )
        raise DecodeError(f"invalid opaque config: {problem} (driver {names.DRIVER_NAME})")
    try:
        return decoder(obj)
    except DecodeError as err:
        raise DecodeError(f"invalid {kind}: {err}") from err


def encode(config: OpaqueConfig) -> bytes:
    """The config as compact JSON, as it travels in ``opaque.parameters``."""
    return json.dumps(config.to_dict(), separators=(",", ":")).encode()
