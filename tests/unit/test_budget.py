"""The per-layer time budget of tests/conftest.py: contention stretches it, and only that."""

from __future__ import annotations

import pytest

from tests import conftest


@pytest.mark.parametrize(
    ("loadavg", "cores", "factor"),
    [
        ("0.10 0.20 0.30 1/200 99", 2, 1.0),  # idle: the budget as written
        ("4.00 2.00 1.00 1/200 99", 2, 2.0),  # both cores busy for a minute
        ("0.50 0.20 0.10 6/200 99", 2, 3.0),  # work that started a moment ago
        ("9.00 9.00 9.00 1/200 99", 2, 4.5),
        ("40.0 30.0 20.0 50/200 99", 2, conftest.MAX_CONTENTION),  # capped
        ("3.00 3.00 3.00 1/200 99", 4, 1.0),  # more cores than runnable work
    ],
)
def test_contention_is_runnable_tasks_per_core_within_bounds(
    loadavg: str, cores: int, factor: float
) -> None:
    assert conftest.contention(loadavg, cores) == pytest.approx(factor)


def test_contention_reads_this_machine() -> None:
    assert 1.0 <= conftest.contention() <= conftest.MAX_CONTENTION


def test_this_test_runs_under_its_stretched_unit_budget(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    budget = request.node.stash[conftest.BUDGET_KEY]
    assert budget == conftest.LAYER_BUDGET_S["unit"]
    assert budget <= marker.args[0] <= budget * conftest.MAX_CONTENTION
