"""Capped exponential backoff with jitter."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compute_domains.infra import backoff


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(0, 0.5), (1, 1.0), (2, 2.0), (3, 3.0), (50, 3.0), (5000, 3.0)],
    ids=["first", "second", "third", "capped", "far", "overflow"],
)
def test_delay_doubles_up_to_the_cap(attempt: int, expected: float) -> None:
    policy = backoff.Backoff(initial=0.5, maximum=3.0, jitter=0.0)
    assert policy.delay(attempt) == expected


@given(attempt=st.integers(0, 10_000), seed=st.integers(0, 2**32))
def test_jittered_delay_stays_within_the_spread(attempt: int, seed: int) -> None:
    policy = backoff.Backoff(initial=0.005, maximum=6.0, jitter=0.25)
    base = policy.base_delay(attempt)
    delay = policy.delay(attempt, random.Random(seed))
    assert base * 0.75 <= delay <= base * 1.25 <= policy.ceiling


def test_injected_rng_makes_delays_reproducible() -> None:
    policy = backoff.Backoff()
    first = [policy.delay(n, random.Random(7)) for n in range(6)]
    again = [policy.delay(n, random.Random(7)) for n in range(6)]
    assert first == again


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial": 0.0},
        {"initial": 2.0, "maximum": 1.0},
        {"factor": 0.5},
        {"jitter": 1.0},
        {"jitter": -0.1},
    ],
    ids=["zero-initial", "cap-below-initial", "shrinking", "full-jitter", "negative-jitter"],
)
def test_invalid_policies_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        backoff.Backoff(**kwargs)


def test_negative_attempt_is_rejected() -> None:
    with pytest.raises(ValueError):
        backoff.Backoff().delay(-1)
