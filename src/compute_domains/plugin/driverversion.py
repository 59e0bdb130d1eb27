"""Check at start-up that the node's driver can run IMEX daemons addressed by DNS name.

Our IMEX daemons always list their peers by DNS name (``compute-domain-daemon-NNNN``), which
``nvidia-imex`` supports from driver 570.158.01 on; NVIDIA's plugin checks the same minimum
when its ``IMEXDaemonsWithDNSNames`` gate is on (its default). The check logs what it compares
in NVIDIA's words (``driver version validation``, which NVIDIA's tooling greps).

Unlike NVIDIA's plugin, a driver below the minimum does not stop start-up: NVIDIA's way out
(turning the gate off for IP addresses) does not exist here, and channels work on any driver;
the warning says that this node's IMEX daemons will not form a domain.
"""

from __future__ import annotations

import logging
import re
from typing import Final

logger = logging.getLogger(__name__)

MIN_DNS_NAMES_DRIVER: Final = "570.158.01"
"""Lowest driver version whose ``nvidia-imex`` accepts peers by DNS name."""

_NUMBERS = re.compile(r"^\d+(\.\d+)*$")


def _parse(version: str) -> tuple[int, ...] | None:
    text = version.strip()
    return tuple(int(part) for part in text.split(".")) if _NUMBERS.match(text) else None


def supports_dns_names(version: str) -> bool | None:
    """Whether driver ``version`` is at least ``MIN_DNS_NAMES_DRIVER``; None if unparsable."""
    found = _parse(version)
    if found is None:
        return None
    minimum = _parse(MIN_DNS_NAMES_DRIVER)
    assert minimum is not None  # a constant
    return found >= minimum


def validate(version: str, node: str) -> bool:
    """Log the driver version check for ``node``; True when the driver is new enough."""
    extra = {"node": node}
    logger.info(
        "Starting driver version validation for IMEX daemons with DNS names "
        "(minimum required version: %s)",
        MIN_DNS_NAMES_DRIVER,
        extra=extra,
    )
    verdict = supports_dns_names(version)
    if verdict:
        logger.info(
            "Driver version validation passed: %s >= %s", version, MIN_DNS_NAMES_DRIVER, extra=extra
        )
        return True
    reason = "is older than" if verdict is False else "cannot be compared with"
    logger.warning(
        "Driver version validation failed: driver %s %s %s; IMEX daemons on this node cannot "
        "address their peers by DNS name and will not form a ComputeDomain (channels still work)",
        version,
        reason,
        MIN_DNS_NAMES_DRIVER,
        extra=extra,
    )
    return False
