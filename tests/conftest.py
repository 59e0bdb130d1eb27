"""Shared fixtures (the built upstream tools, a short sim home) and each layer's time budget.

Strictness is in pyproject; the budget is here because it depends on where a test lives:
every test gets its layer's timeout (pytest-timeout, setup and teardown included), and a test
may tighten it but not loosen it. Unit tests have about 2 s each (STYLE.md §2.9: a unit suite
runs in seconds); one that genuinely needs more (real subprocesses, a real IMEX window) says
how much and why with ``@pytest.mark.slow_unit(seconds, reason)``, up to a hard ceiling.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.mark.structures import Mark

from compute_domains.cli import options
from compute_domains.sim import toolchain


@pytest.fixture(scope="session")
def toolset() -> toolchain.Toolset:
    """The built upstream tools (`make test` builds them first; this only finds them)."""
    built, _ = asyncio.run(toolchain.ensure_built(options.toolchain_settings()))
    return built


@pytest.fixture(scope="session")
def sim_home() -> Iterator[Path]:
    # Short path under /tmp: unix socket paths of simulated nodes must stay under 108 bytes.
    home = Path(tempfile.mkdtemp(prefix="cdsim-", dir="/tmp"))
    yield home
    if not keep_sims():
        shutil.rmtree(home, ignore_errors=True)


def keep_sims() -> bool:
    """CD_KEEP_SIM=1 keeps every sim's folder (each component's log) to debug a failure."""
    return bool(os.environ.get("CD_KEEP_SIM"))


LAYER_BUDGET_S = {"unit": 2.0, "integration": 300.0, "e2e": 1800.0}
"""Per-test timeout of each layer (folder under tests/); a module or test may only lower it."""
UNIT_CEILING_S = 10.0
"""The most a ``slow_unit`` marker may grant one unit test."""
PROPERTY_BUDGET_S = 8.0
"""A unit property test (hypothesis) runs its body for 60-200 generated examples: 1-3 s alone,
twice that with the cores busy, so it gets this instead of the 2 s of one example."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "slow_unit(seconds, reason): a unit test that needs more than the 2 s budget, and why",
    )


def _budget(item: pytest.Item, layer: str) -> float:
    """The timeout this test runs under; a loosened limit without a stated reason is an error."""
    budget = LAYER_BUDGET_S[layer]
    if layer == "unit" and getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        budget = PROPERTY_BUDGET_S
    slow: Mark | None = item.get_closest_marker("slow_unit")
    if slow is not None:
        seconds, reason = (*slow.args, *slow.kwargs.values())[:2]
        if layer != "unit" or not str(reason).strip() or not 0 < float(seconds) <= UNIT_CEILING_S:
            raise pytest.UsageError(
                f"{item.nodeid}: slow_unit(seconds <= {UNIT_CEILING_S}, reason) is for unit tests"
            )
        budget = float(seconds)
    declared: Mark | None = item.get_closest_marker("timeout")
    if declared is not None and declared.args:
        if float(declared.args[0]) > budget:
            raise pytest.UsageError(
                f"{item.nodeid}: timeout {declared.args[0]} s exceeds the {layer} budget of "
                f"{budget:g} s" + (" (use slow_unit(seconds, reason))" if layer == "unit" else "")
            )
        budget = float(declared.args[0])
    return budget


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give every test its layer's timeout (closest marker, so pytest-timeout applies it)."""
    root = Path(__file__).parent
    for item in items:
        try:
            layer = item.path.relative_to(root).parts[0]
        except ValueError:
            continue
        if layer in LAYER_BUDGET_S:
            item.add_marker(pytest.mark.timeout(_budget(item, layer)), append=False)


@pytest.fixture
def root_restored() -> Iterator[None]:
    """Commands configure the root logger; put the test runner's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
