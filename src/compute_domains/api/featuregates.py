"""NVIDIA's feature-gate names, and the value each one has in compute-domains.

NVIDIA's v25.12.0 driver switches behaviour with feature gates (``FEATURE_GATES``, chart value
``featureGates``). compute-domains has no gates: each behaviour is either fixed or a setting.
This table says which, so the components can report their effective configuration at startup in
NVIDIA's vocabulary (its tooling greps the startup line, e.g. for ``"MPSSupport":false``). The
chart maps or refuses ``featureGates`` at install with the same facts (``_compat.tpl``).

Fixed values: ``IMEXDaemonsWithDNSNames`` and ``ComputeDomainCliques`` are always on (the only
mode implemented); the GPU-allocation gates are always off (GPU allocation is out of scope).
``CrashOnNVLinkFabricErrors`` is the plugin's ``strict_fabric`` setting.
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Final

ALWAYS_ON: Final = ("ComputeDomainCliques", "IMEXDaemonsWithDNSNames")
"""Behaviours compute-domains always has (NVIDIA's defaults; disabling them is refused)."""
GPU_ONLY: Final = (
    "DynamicMIG",
    "MPSSupport",
    "NVMLDeviceHealthCheck",
    "PassthroughSupport",
    "TimeSlicingSettings",
)
"""Gates of NVIDIA's GPU kubelet plugin: always off here (GPU allocation is out of scope)."""
CRASH_ON_FABRIC_ERRORS: Final = "CrashOnNVLinkFabricErrors"
"""The gate that is our plugin's ``strict_fabric`` setting."""

FIXED: Final = MappingProxyType(
    {**{name: True for name in ALWAYS_ON}, **{name: False for name in GPU_ONLY}}
)
"""Every gate whose value does not depend on a setting."""


def effective(*, strict_fabric: bool | None = None) -> dict[str, bool]:
    """The effective value of each gate; ``strict_fabric`` adds the fabric gate when known."""
    gates = dict(FIXED)
    if strict_fabric is not None:
        gates[CRASH_ON_FABRIC_ERRORS] = strict_fabric
    return gates


def render(gates: dict[str, bool]) -> str:
    """``{"ComputeDomainCliques":true,...}``: sorted, compact JSON, as tooling greps it."""
    return json.dumps(dict(sorted(gates.items())), separators=(",", ":"))
