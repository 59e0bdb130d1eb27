"""The pure decision of leader election: when may a candidate take the Lease."""

from __future__ import annotations

import pytest

from compute_domains.controller.leaderelection import Record, may_acquire


def _rec(holder: str) -> Record:
    return Record(holder=holder, renew_time="t", transitions=0)


@pytest.mark.parametrize(
    ("record", "observed_at", "now", "expected"),
    [
        (None, 0.0, 0.0, True),
        (_rec(""), 0.0, 0.0, True),
        (_rec("me"), 0.0, 100.0, True),
        (_rec("other"), 10.0, 20.0, False),
        (_rec("other"), 10.0, 24.9, False),
        (_rec("other"), 10.0, 25.0, True),
    ],
    ids=["no-lease", "released", "mine", "fresh", "almost-expired", "expired"],
)
def test_may_acquire(record: Record | None, observed_at: float, now: float, expected: bool) -> None:
    assert may_acquire(record, me="me", observed_at=observed_at, now=now, duration=15.0) is expected
