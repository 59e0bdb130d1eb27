"""``make bench`` runs the scale sizes only when asked (issue 15 point 6): checked with ``make -n``,
which prints the recipe without running it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _recipe(*args: str) -> str:
    make = shutil.which("make")
    if make is None:  # the Quick start itself needs make: its absence is a broken machine
        pytest.fail("make is not installed")
    out = subprocess.run(
        [make, "-n", "-C", str(ROOT), "bench", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout


def test_plain_make_bench_runs_no_scale_size() -> None:
    text = _recipe()
    assert "bench formation --sizes 4,18,36" in text
    assert "--nodes-mode virtual" not in text
    assert "1152" not in text


def test_bench_large_adds_the_scale_sizes_and_the_816_shape() -> None:
    text = _recipe("BENCH_LARGE=1")
    assert "--nodes-mode virtual --repeats 1 --prefix scale" in text
    assert "--sizes 72,288,1152" in text
    assert "--sizes 256 --pods-per-node 4" in text
    assert text.index("bench churn") < text.index("--prefix scale") < text.index("bench report")
