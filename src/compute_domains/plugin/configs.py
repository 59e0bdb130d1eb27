"""Which opaque config applies to which allocated device of a claim (pure: claim → plan).

Rules (upstream §2.7, tightened where upstream retries bad input for 45 s):
- Config entries come from ``status.allocation.devices.config``: class-sourced first, then
  claim-sourced, each keeping its order; later entries take precedence. Entries for other
  drivers are ignored; an entry of ours without ``opaque`` parameters is an error.
- Our entries are decoded strictly (``api.configs.decode``): unknown fields, a wrong kind or a
  missing ``domainID`` fail with a ``PermanentError`` whose text names the problem, e.g.
  ``unknown field "x"``; the kubelet shows it verbatim in the pod's event.
- Each allocation result of our driver must name a device this node offers (in our pool).
  The highest-precedence entry that lists the result's request (or its parent request, for
  ``req/sub``) applies; otherwise the highest-precedence entry without a request list whose kind
  fits the device type. A channel config on a daemon device (or the reverse), or no config at
  all, is a permanent error (upstream: a retryable one that can never heal).
- One claim belongs to one ComputeDomain: results that resolve to two domain IDs are refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from compute_domains.api import configs as api_configs
from compute_domains.api import names
from compute_domains.api.computedomain import AllocationMode
from compute_domains.infra import errors
from compute_domains.plugin import devices

ALL_CHANNELS = 2048
"""Channel device nodes injected in ``All`` mode (upstream's fixed maximum)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    """A ResourceClaim as the plugin prepares it (from one fresh read of the API)."""

    uid: str
    namespace: str
    name: str
    resource_version: str
    status: Mapping[str, Any]
    """``status`` as plain API JSON (camelCase); stored in the checkpoint as it is."""

    @property
    def ref(self) -> str:
        """``namespace/name`` for messages."""
        return f"{self.namespace}/{self.name}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Assignment:
    """One allocated device of ours and the config that applies to it."""

    request: str
    """The request name as allocated (may be ``req/sub``)."""
    pool: str
    device: str
    type: devices.DeviceType
    admin_access: bool
    config: api_configs.OpaqueConfig

    @property
    def request_name(self) -> str:
        """The request name the kubelet wants back (sub-request suffix stripped)."""
        return self.request.split("/", 1)[0]

    @property
    def channels(self) -> range:
        """The IMEX channels a channel device injects (empty for a daemon device)."""
        if not isinstance(self.config, api_configs.ComputeDomainChannelConfig):
            return range(0)
        if self.config.allocation_mode is AllocationMode.ALL:
            return range(ALL_CHANNELS)
        return range(1)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """What preparing a claim means on this node."""

    domain_uid: str
    """The one ComputeDomain UID every assignment refers to."""
    assignments: tuple[Assignment, ...]

    @property
    def has_channels(self) -> bool:
        """Whether the claim holds channel slots (workload claim)."""
        return any(a.type is devices.DeviceType.CHANNEL for a in self.assignments)

    @property
    def has_daemon(self) -> bool:
        """Whether the claim holds the daemon device."""
        return any(a.type is devices.DeviceType.DAEMON for a in self.assignments)

    def device_names(self, *, include_admin: bool = False) -> set[str]:
        """Names of the devices the claim holds (admin-access ones only on request)."""
        return {a.device for a in self.assignments if include_admin or not a.admin_access}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Entry:
    requests: tuple[str, ...]
    config: api_configs.OpaqueConfig


def plan(claim: Claim, *, node: str, offered: Mapping[str, devices.Allocatable]) -> Plan:
    """Match the claim's allocated devices with their configs.

    Args:
        claim: the claim, with its allocation in ``status``.
        node: this node's name (our pool name).
        offered: the devices this node offers, by name.

    Raises:
        errors.PermanentError: the claim cannot be prepared here as it is (bad config, a
            device we do not offer, no config, two domains).
    """
    allocation = _obj(claim.status.get("allocation"))
    if not allocation:
        raise errors.PermanentError(f"claim {claim.ref} is not allocated")
    alloc_devices = _obj(allocation.get("devices"))
    entries = _entries(_list(alloc_devices.get("config")))
    out: list[Assignment] = []
    for result in _list(alloc_devices.get("results")):
        result = _obj(result)
        if result.get("driver") != names.DRIVER_NAME:
            continue
        request, device = str(result.get("request", "")), str(result.get("device", ""))
        pool = str(result.get("pool", ""))
        if pool != node or device not in offered:
            raise errors.PermanentError(
                f"requested device {pool}/{device} is not allocatable on node {node}"
            )
        kind = offered[device].type
        config = _select(entries, request, kind)
        out.append(
            Assignment(
                request=request,
                pool=pool,
                device=device,
                type=kind,
                admin_access=bool(result.get("adminAccess")),
                config=config,
            )
        )
    if not out:
        raise errors.PermanentError(f"claim {claim.ref} has no device of {names.DRIVER_NAME}")
    domains = sorted({a.config.domain_uid for a in out})
    if len(domains) > 1:
        raise errors.PermanentError(
            f"claim {claim.ref} refers to more than one ComputeDomain ({', '.join(domains)})"
        )
    return Plan(domain_uid=domains[0], assignments=tuple(out))


def _entries(raw: Sequence[Any]) -> list[_Entry]:
    """Our decoded config entries, lowest precedence first."""
    ordered = sorted(
        (_obj(c) for c in raw),
        key=lambda c: 0 if c.get("source") == "FromClass" else 1,  # stable: keeps list order
    )
    out = []
    for entry in ordered:
        if entry.get("source") not in ("FromClass", "FromClaim"):
            raise errors.PermanentError(f"invalid config source {entry.get('source')!r}")
        opaque = entry.get("opaque")
        if not isinstance(opaque, Mapping):
            raise errors.PermanentError("only opaque parameters are supported by this driver")
        if opaque.get("driver") != names.DRIVER_NAME:
            continue
        params = opaque.get("parameters")
        if not isinstance(params, Mapping):
            raise errors.PermanentError("opaque parameters of this driver must be a JSON object")
        config = api_configs.decode(params)
        requests = tuple(str(r) for r in _list(entry.get("requests")))
        out.append(_Entry(requests=requests, config=config))
    return out


def _select(
    entries: list[_Entry], request: str, kind: devices.DeviceType
) -> api_configs.OpaqueConfig:
    parent = request.split("/", 1)[0]
    for entry in reversed(entries):
        if entry.requests and not {request, parent} & set(entry.requests):
            continue
        fits = _fits(entry.config, kind)
        if entry.requests and not fits:
            raise errors.PermanentError(
                f"cannot apply {entry.config.KIND} to request {request}: it was allocated a "
                f"{kind.value} device"
            )
        if fits:
            return entry.config
    wanted = (
        names.CHANNEL_CONFIG_KIND
        if kind is devices.DeviceType.CHANNEL
        else names.DAEMON_CONFIG_KIND
    )
    raise errors.PermanentError(
        f"no {wanted} applies to request {request}; the claim must carry one for driver "
        f"{names.DRIVER_NAME}"
    )


def _fits(config: api_configs.OpaqueConfig, kind: devices.DeviceType) -> bool:
    if kind is devices.DeviceType.CHANNEL:
        return isinstance(config, api_configs.ComputeDomainChannelConfig)
    return isinstance(config, api_configs.ComputeDomainDaemonConfig)


def _obj(raw: object) -> Mapping[str, Any]:
    return raw if isinstance(raw, Mapping) else {}


def _list(raw: object) -> list[Any]:
    return raw if isinstance(raw, list) else []
