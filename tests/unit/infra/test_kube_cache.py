"""The shared informer cache: events, re-list differences, indexes, own writes, subscribers."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2 as httpx
import pytest
from lightkube.resources.core_v1 import ConfigMap

from compute_domains.infra import backoff
from compute_domains.infra.kube import cache
from tests.unit.infra.kubefakes import ScriptedClient, api_error, cm

FAST = backoff.Backoff(initial=0.001, maximum=0.01)


def _cache(changes: list[tuple[Any, Any]], client: Any = None) -> cache.Cache[ConfigMap]:
    c: cache.Cache[ConfigMap] = cache.Cache(
        client,
        ConfigMap,
        name="test",
        indexers={
            "cd": cache.label_indexer("cd"),
            "ns": cache.namespace_indexer,
            "node": cache.field_indexer(lambda o: (o.data or {}).get("node")),
        },
        relist_backoff=FAST,
    )
    c.subscribe(lambda old, new: changes.append((old, new)))
    return c


def _names(objs: list[ConfigMap]) -> list[str]:
    return [o.metadata.name or "" for o in objs]  # type: ignore[union-attr]


def test_events_update_store_indexes_and_notify() -> None:
    changes: list[tuple[Any, Any]] = []
    inf = _cache(changes)
    inf._apply("ADDED", cm("a", "1", "u1"))
    inf._apply("ADDED", cm("b", "2", "u1"))
    assert _names(inf.by_index("cd", "u1")) == ["a", "b"]
    inf._apply("MODIFIED", cm("a", "3", "u2"))
    assert _names(inf.by_index("cd", "u1")) == ["b"]
    assert _names(inf.by_index("cd", "u2")) == ["a"]
    inf._apply("DELETED", cm("b", "4", "u1"))
    assert inf.by_index("cd", "u1") == []
    assert inf.index_values("cd") == {"u2"}
    assert [(o is None, n is None) for o, n in changes] == [
        (True, False),
        (True, False),
        (False, False),
        (False, True),
    ]


def test_namespace_and_field_indexes_follow_moves() -> None:
    inf = _cache([])
    inf._apply("ADDED", cm("a", "1", ns="x", data="n1"))
    inf._apply("ADDED", cm("b", "2", ns="y", data="n1"))
    inf._apply("ADDED", cm("c", "3", ns="y"))  # no field value: not in the field index
    assert _names(inf.by_index("ns", "y")) == ["b", "c"]
    assert _names(inf.by_index("node", "n1")) == ["a", "b"]
    inf._apply("MODIFIED", cm("b", "4", ns="y", data="n2"))
    assert _names(inf.by_index("node", "n1")) == ["a"]
    assert inf.index_values("node") == {"n1", "n2"}


def test_own_writes_are_visible_and_older_events_do_not_undo_them() -> None:
    inf = _cache([])
    inf._apply("ADDED", cm("a", "5"))
    inf.observe(cm("a", "9", "mine"))
    assert inf.get("ns", "a").metadata.resourceVersion == "9"  # type: ignore[union-attr]
    inf._apply("MODIFIED", cm("a", "7"))  # the watch catching up with an older version
    assert inf.get("ns", "a").metadata.resourceVersion == "9"  # type: ignore[union-attr]
    inf.observe(cm("a", "8"))  # an older write result never replaces a newer object
    assert inf.get("ns", "a").metadata.resourceVersion == "9"  # type: ignore[union-attr]
    inf._apply("MODIFIED", cm("a", "10"))
    assert inf.get("ns", "a").metadata.resourceVersion == "10"  # type: ignore[union-attr]


def test_relist_reports_only_differences() -> None:
    changes: list[tuple[Any, Any]] = []
    inf = _cache(changes)
    inf._replace([cm("a", "1"), cm("b", "1")])
    changes.clear()
    inf._replace([cm("a", "1"), cm("c", "2")])
    summary = [
        ((o.metadata.name if o else "-"), (n.metadata.name if n else "-")) for o, n in changes
    ]
    assert summary == [("b", "-"), ("-", "c")]
    assert _names(inf.objects()) == ["a", "c"]


def test_two_consumers_share_one_cache_and_a_failing_one_does_not_starve_the_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first: list[str] = []
    second: list[str] = []
    inf = _cache([])

    def broken(_old: Any, _new: Any) -> None:
        raise RuntimeError("consumer bug")

    inf.subscribe(lambda _o, n: first.append(n.metadata.name if n else "-"))
    inf.subscribe(broken)
    stop_second = inf.subscribe(lambda _o, n: second.append(n.metadata.name if n else "-"))
    inf._apply("ADDED", cm("a", "1"))
    stop_second()
    inf._apply("ADDED", cm("b", "2"))
    assert first == ["a", "b"]
    assert second == ["a"]  # unsubscribed before b
    assert sum("a change handler failed" in r.getMessage() for r in caplog.records) == 2


async def _until(condition: Any) -> None:
    async with asyncio.timeout(2):
        while not condition():
            await asyncio.sleep(0.001)


async def test_run_recovers_from_errors_and_expired_watches() -> None:
    client = ScriptedClient(
        lists=[
            httpx.ConnectError("api server restarting"),
            ([cm("a", "1")], "5"),
            ([cm("a", "6"), cm("b", "8")], "9"),
        ],
        watches=[[("MODIFIED", cm("a", "6")), api_error(410, "Expired")]],
    )
    changes: list[tuple[Any, Any]] = []
    inf = _cache(changes, client)
    task = asyncio.create_task(inf.run())
    try:
        await asyncio.wait_for(inf.synced.wait(), 2)
        await _until(lambda: inf.get("ns", "b") is not None)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert client.watch_versions == ["5", "9"]
    assert {o.metadata.name for o in inf.objects()} == {"a", "b"}
    assert inf.get("ns", "a").metadata.resourceVersion == "6"  # type: ignore[union-attr]
    # a added, a modified (watch), b added (re-list); the unchanged a is not reported again.
    assert [(o is None, n.metadata.name) for o, n in changes] == [
        (True, "a"),
        (False, "a"),
        (True, "b"),
    ]


def test_keyed_and_indexed_subscribers_get_only_their_changes() -> None:
    inf = _cache([])
    mine: list[str] = []
    on_n1: list[tuple[str | None, str | None]] = []
    inf.subscribe(
        lambda _o, n: mine.append(n.metadata.resourceVersion if n else "gone"), key=("ns", "a")
    )

    def node_change(old: Any, new: Any) -> None:
        on_n1.append((old and old.metadata.name, new and new.metadata.name))

    stop = inf.subscribe(node_change, index="node", value="n1")
    inf._apply("ADDED", cm("a", "1", data="n1"))
    inf._apply("ADDED", cm("b", "2", data="n2"))  # another object, another node: nobody
    inf._apply("MODIFIED", cm("a", "3", data="n2"))  # leaves n1: n1's subscriber hears it
    inf._apply("MODIFIED", cm("a", "4", data="n2"))  # on n2 only now
    inf._apply("DELETED", cm("a", "5", data="n2"))
    stop()
    inf._apply("ADDED", cm("c", "6", data="n1"))  # unsubscribed
    assert mine == ["1", "3", "4", "gone"]
    assert on_n1 == [(None, "a"), ("a", "a")]


def test_relist_differences_reach_keyed_subscribers() -> None:
    inf = _cache([])
    seen: list[Any] = []
    inf.subscribe(lambda _o, n: seen.append(n), key=("ns", "a"))
    inf._replace([cm("a", "1"), cm("b", "1")])
    inf._replace([cm("b", "2")])  # a deleted while the watch was down (410, re-list)
    assert [n and n.metadata.resourceVersion for n in seen] == ["1", None]


def test_added_indexer_covers_objects_already_stored() -> None:
    inf = _cache([])
    inf._apply("ADDED", cm("a", "1", ns="x"))
    inf.add_indexer("name", lambda o: [o.metadata.name])
    inf._apply("ADDED", cm("b", "2", ns="x"))
    assert _names(inf.by_index("name", "a")) == ["a"]
    assert _names(inf.by_index("name", "b")) == ["b"]
    with pytest.raises(ValueError, match="no index"):
        inf.subscribe(lambda _o, _n: None, index="missing", value="v")
