"""Child-process plumbing: IMEX's own level tags become our log levels."""

from __future__ import annotations

import logging

import pytest

from compute_domains.daemon import childproc


@pytest.mark.parametrize(
    ("line", "level"),
    [
        ("[Mar 27 2025 15:47:10] [INFO] [tid 39] Connection established", logging.INFO),
        ("[Mar 27 2025 15:47:10] [WARNING] [tid 39] Undelivered messages", logging.WARNING),
        ("[Mar 27 2025 15:47:10] [ERROR] [tid 39] No matching network interface", logging.ERROR),
        ("[Mar 27 2025 15:47:10] [CRITICAL] [tid 39] abort", logging.CRITICAL),
        ("INFO: using stderr for IMEX logging", logging.INFO),
        ("plain text", logging.INFO),
    ],
    ids=["info", "warning", "error", "critical", "untagged-notice", "plain"],
)
def test_imex_line_levels(line: str, level: int) -> None:
    assert childproc.imex_line_level(line) == level
