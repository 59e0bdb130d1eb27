"""Shared fixtures (the built upstream tools, a short sim home) and each layer's time budget.

Strictness is in pyproject; the budget is here because it depends on where a test lives:
every test gets its layer's timeout (pytest-timeout, setup and teardown included), and a test
may tighten it but not loosen it. Unit tests have about 2 s each (STYLE.md §2.9: a unit suite
runs in seconds); one that genuinely needs more (real subprocesses, a real IMEX window) says
how much and why with ``@pytest.mark.slow_unit(seconds, reason)``, up to a hard ceiling.

A budget is seconds on an otherwise idle machine. When other work keeps the cores busy, a test
gets the same share of CPU in more wall time, so each test's timeout is its budget times the
contention at its start (runnable tasks per core, ``contention()``, at most ``MAX_CONTENTION``):
the suites pass with both cores saturated by other work, and a test that is slow on a quiet
machine still fails.
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

_TOOLSET = pytest.StashKey[toolchain.Toolset]()


def _find_tools() -> toolchain.Toolset:
    built, _ = asyncio.run(toolchain.ensure_built(options.toolchain_settings()))
    return built


def pytest_collection_finish(session: pytest.Session) -> None:
    """Find the tools before any test runs when some test needs them: checking them reads
    (checksums) every binary, 18 s from a cold page cache, which must not land in the first
    unit test's 2 s budget."""
    if any("toolset" in getattr(item, "fixturenames", ()) for item in session.items):
        session.config.stash[_TOOLSET] = _find_tools()


@pytest.fixture(scope="session")
def toolset(request: pytest.FixtureRequest) -> toolchain.Toolset:
    """The built upstream tools (`make test` builds them first; this only finds them)."""
    found = request.config.stash.get(_TOOLSET, None)
    return found if found is not None else _find_tools()


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


MAX_CONTENTION = 5.0
"""The most a busy machine stretches a budget: beyond this a run is not worth waiting for."""


def contention(loadavg: str | None = None, cores: int | None = None) -> float:
    """How many times longer a CPU-bound test takes now than alone (1.0 on an idle machine).

    Runnable tasks per core, from ``/proc/loadavg``: the larger of the 1-minute load average
    (steady work) and the tasks runnable at this moment (work that started too recently for the
    average), never below 1 nor above ``MAX_CONTENTION``. The runnable count includes this
    test process itself, as the load average does.
    """
    fields = (loadavg if loadavg is not None else Path("/proc/loadavg").read_text()).split()
    ncores = cores or os.cpu_count() or 1
    runnable = float(fields[3].split("/")[0])
    return min(MAX_CONTENTION, max(1.0, float(fields[0]) / ncores, runnable / ncores))


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
            item.stash[BUDGET_KEY] = _budget(item, layer)
            item.add_marker(pytest.mark.timeout(item.stash[BUDGET_KEY]), append=False)


BUDGET_KEY = pytest.StashKey[float]()
"""A test's budget on an idle machine, before contention stretches it."""


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Stretch the timeout by the contention at the test's start, before pytest-timeout reads it."""
    budget = item.stash.get(BUDGET_KEY, None)
    if budget is not None:
        factor = contention()
        item.add_marker(pytest.mark.timeout(round(budget * factor, 1)), append=False)
        if factor > 1.0:
            item.user_properties.append(("budget", f"{budget:g} s x contention {factor:.1f}"))
    yield


@pytest.fixture
def root_restored() -> Iterator[None]:
    """Commands configure the root logger; put the test runner's back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
