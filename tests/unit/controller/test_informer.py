"""The informer's store: events, re-list differences, indexes, read-your-writes."""

from __future__ import annotations

from typing import Any, cast

from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap

from compute_domains.controller import informer, kubeapi, metrics


def _cm(name: str, rv: str, label: str | None = None, ns: str = "ns") -> ConfigMap:
    labels = {"cd": label} if label else None
    return ConfigMap.from_dict(
        {"metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels}}
    )


def _informer(changes: list[tuple[Any, Any]]) -> informer.Informer[ConfigMap]:
    api = kubeapi.Api(cast(AsyncClient, None), metrics.Metrics())
    return informer.Informer(
        api,
        ConfigMap,
        name="test",
        indexers={"cd": informer.label_indexer("cd")},
        on_change=lambda old, new: changes.append((old, new)),
    )


def _names(objs: list[ConfigMap]) -> list[str]:
    return [o.metadata.name or "" for o in objs]  # type: ignore[union-attr]


def test_events_update_store_indexes_and_notify() -> None:
    changes: list[tuple[Any, Any]] = []
    inf = _informer(changes)
    inf._apply("ADDED", _cm("a", "1", "u1"))
    inf._apply("ADDED", _cm("b", "2", "u1"))
    assert _names(inf.by_index("cd", "u1")) == ["a", "b"]
    inf._apply("MODIFIED", _cm("a", "3", "u2"))
    assert _names(inf.by_index("cd", "u1")) == ["b"]
    assert _names(inf.by_index("cd", "u2")) == ["a"]
    inf._apply("DELETED", _cm("b", "4", "u1"))
    assert inf.by_index("cd", "u1") == []
    assert inf.index_values("cd") == {"u2"}
    assert [(o is None, n is None) for o, n in changes] == [
        (True, False),
        (True, False),
        (False, False),
        (False, True),
    ]


def test_own_writes_are_visible_and_older_events_do_not_undo_them() -> None:
    changes: list[tuple[Any, Any]] = []
    inf = _informer(changes)
    inf._apply("ADDED", _cm("a", "5"))
    inf.observe(_cm("a", "9", "mine"))
    assert inf.get("ns", "a").metadata.resourceVersion == "9"  # type: ignore[union-attr]
    inf._apply("MODIFIED", _cm("a", "7"))  # the watch catching up with an older version
    assert inf.get("ns", "a").metadata.resourceVersion == "9"  # type: ignore[union-attr]
    inf.observe(_cm("a", "8"))  # an older write result never replaces a newer object
    assert inf.get("ns", "a").metadata.resourceVersion == "9"  # type: ignore[union-attr]
    inf._apply("MODIFIED", _cm("a", "10"))
    assert inf.get("ns", "a").metadata.resourceVersion == "10"  # type: ignore[union-attr]


def test_relist_reports_only_differences() -> None:
    changes: list[tuple[Any, Any]] = []
    inf = _informer(changes)
    inf._replace({("ns", "a"): _cm("a", "1"), ("ns", "b"): _cm("b", "1")})
    changes.clear()
    inf._replace({("ns", "a"): _cm("a", "1"), ("ns", "c"): _cm("c", "2")})
    summary = [
        ((o.metadata.name if o else "-"), (n.metadata.name if n else "-")) for o, n in changes
    ]
    assert summary == [("b", "-"), ("-", "c")]
    assert _names(inf.objects()) == ["a", "c"]
