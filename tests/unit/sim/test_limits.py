"""A sim supervisor raises its open-files limit to what its virtual nodes need."""

from __future__ import annotations

import resource

import pytest

from compute_domains.sim import limits


class _Limits:
    def __init__(self, soft: int, hard: int, may_raise_hard: bool) -> None:
        self.value = (soft, hard)
        self.may_raise_hard = may_raise_hard

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.value

    def set(self, which: int, value: tuple[int, int]) -> None:
        if value[1] > self.value[1] and not self.may_raise_hard:
            raise ValueError("not allowed to raise the hard limit")
        self.value = value


def _patch(monkeypatch: pytest.MonkeyPatch, fake: _Limits) -> None:
    monkeypatch.setattr(resource, "getrlimit", fake.get)
    monkeypatch.setattr(resource, "setrlimit", fake.set)


def test_1152_nodes_need_more_than_the_20000_that_ran_out(monkeypatch: pytest.MonkeyPatch) -> None:
    assert limits.wanted(1153) > 20000 + 16 * 1153
    fake = _Limits(20000, 20000, may_raise_hard=True)
    _patch(monkeypatch, fake)
    assert limits.raise_open_files(1153) == limits.wanted(1153)
    assert fake.value == (limits.wanted(1153), limits.wanted(1153))


def test_a_small_sim_leaves_the_limit_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _Limits(20000, 20000, may_raise_hard=False)
    _patch(monkeypatch, fake)
    assert limits.raise_open_files(19) == 20000
    assert fake.value == (20000, 20000)


def test_without_privilege_the_soft_limit_goes_up_to_the_hard_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _Limits(1024, 50000, may_raise_hard=False)
    _patch(monkeypatch, fake)
    assert limits.raise_open_files(1153) == 50000
    assert fake.value == (50000, 50000)
