"""The one Event recorder: aggregation, the LRU bound, expiry, and never failing its caller."""

from __future__ import annotations

import datetime
from typing import Any

import httpx2 as httpx
from lightkube.models.core_v1 import ObjectReference

from compute_domains.infra.kube import events
from tests.unit.infra.kubefakes import api_error

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class _Writer:
    """Stores created Events by name; applies count bumps; fails on request."""

    def __init__(self) -> None:
        self.events: dict[str, Any] = {}
        self.fail_next: Exception | None = None

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err

    async def create(self, obj: Any) -> Any:
        self._maybe_fail()
        self.events[obj.metadata.name] = obj
        return obj

    async def patch(self, _res: Any, name: str, body: Any, *, namespace: str | None = None) -> Any:
        self._maybe_fail()
        if name not in self.events:
            raise api_error(404, "NotFound")
        self.events[name].count = body["count"]
        self.events[name].lastTimestamp = body["lastTimestamp"]
        return self.events[name]


def _pod(name: str = "p") -> ObjectReference:
    return ObjectReference(apiVersion="v1", kind="Pod", name=name, namespace="ns", uid=f"u-{name}")


def _recorder(writer: _Writer, remember: int = 8) -> events.Recorder:
    return events.Recorder(
        writer, component="test", instance="n1", host="n1", remember=remember, now=lambda: T0
    )


def _counts(writer: _Writer) -> list[tuple[str, str, int]]:
    return sorted((e.reason, e.message, e.count) for e in writer.events.values())


async def test_repeats_aggregate_into_one_event_per_object_reason_and_message() -> None:
    writer = _Writer()
    rec = _recorder(writer)
    for _ in range(3):
        await rec.emit(_pod(), events.WARNING, "BackOff", "restarting")
    await rec.emit(_pod(), events.WARNING, "BackOff", "another text")
    await rec.emit(_pod("q"), events.WARNING, "BackOff", "restarting")
    assert _counts(writer) == [
        ("BackOff", "another text", 1),
        ("BackOff", "restarting", 1),
        ("BackOff", "restarting", 3),
    ]
    one = next(e for e in writer.events.values() if e.count == 3)
    assert (one.source.component, one.source.host, one.reportingInstance) == ("test", "n1", "n1")


async def test_memory_is_bounded_and_least_recently_used_series_go_first() -> None:
    writer = _Writer()
    rec = _recorder(writer, remember=2)
    await rec.emit(_pod(), events.NORMAL, "R", "a")
    await rec.emit(_pod(), events.NORMAL, "R", "b")
    await rec.emit(_pod(), events.NORMAL, "R", "a")  # a is now the most recent
    await rec.emit(_pod(), events.NORMAL, "R", "c")  # evicts b
    assert len(rec) == 2
    await rec.emit(_pod(), events.NORMAL, "R", "a")  # still remembered: aggregated
    await rec.emit(_pod(), events.NORMAL, "R", "b")  # forgotten: a new Event
    assert _counts(writer) == [("R", "a", 3), ("R", "b", 1), ("R", "b", 1), ("R", "c", 1)]
    assert len(rec) == 2


async def test_an_expired_event_starts_a_new_one() -> None:
    writer = _Writer()
    rec = _recorder(writer)
    await rec.emit(_pod(), events.NORMAL, "R", "m")
    writer.events.clear()  # the server's Event TTL ran out
    await rec.emit(_pod(), events.NORMAL, "R", "m")
    assert _counts(writer) == [("R", "m", 1)]


async def test_failures_are_dropped_not_raised_and_aggregation_can_be_off() -> None:
    writer = _Writer()
    rec = _recorder(writer)
    writer.fail_next = httpx.ConnectError("api server down")
    await rec.emit(_pod(), events.NORMAL, "R", "m")
    writer.fail_next = api_error(403, "Forbidden")
    await rec.emit(_pod(), events.NORMAL, "R", "m")
    assert writer.events == {}
    assert len(rec) == 0
    plain = _recorder(writer, remember=0)
    await plain.emit(_pod(), events.NORMAL, "R", "m")
    await plain.emit(_pod(), events.NORMAL, "R", "m")
    assert _counts(writer) == [("R", "m", 1), ("R", "m", 1)]
    long = "x" * 5000
    await rec.emit(_pod(), events.NORMAL, "Long", long)
    assert max(len(e.message) for e in writer.events.values()) == events.MESSAGE_LIMIT
