"""The start-up driver check for IMEX daemons addressed by DNS name (NVIDIA's minimum)."""

from __future__ import annotations

import logging

import pytest

from compute_domains.plugin import driverversion


@pytest.mark.parametrize(
    ("version", "verdict"),
    [
        ("580.95.05", True),
        ("570.158.01", True),
        ("570.158.1", True),
        ("570.158.02", True),
        ("575.0", True),
        ("570.158.00", False),
        ("570.124.06", False),
        ("550.163.01", False),
        ("", None),
        ("580.95.05-custom", None),
        ("N/A", None),
    ],
)
def test_minimum_is_compared_number_by_number(version: str, verdict: bool | None) -> None:
    assert driverversion.supports_dns_names(version) is verdict


def test_a_new_enough_driver_passes_in_nvidias_words(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        assert driverversion.validate("580.95.05", "n1")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.INFO,
            "Starting driver version validation for IMEX daemons with DNS names "
            "(minimum required version: 570.158.01)",
        ),
        (logging.INFO, "Driver version validation passed: 580.95.05 >= 570.158.01"),
    ]
    assert all(getattr(r, "node", None) == "n1" for r in caplog.records)


@pytest.mark.parametrize(
    ("version", "reason"),
    [("570.124.06", "is older than"), ("weird", "cannot be compared with")],
)
def test_an_old_or_unknown_driver_is_a_warning_not_a_stop(
    version: str, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        assert not driverversion.validate(version, "n1")
    last = caplog.records[-1]
    assert last.levelno == logging.WARNING
    assert f"Driver version validation failed: driver {version} {reason} 570.158.01" in (
        last.getMessage()
    )
    assert "will not form a ComputeDomain" in last.getMessage()
