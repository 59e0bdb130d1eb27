"""The one list+watch stream: resume where a watch stopped, re-list on 410 and on errors."""

from __future__ import annotations

import random
from typing import Any

from lightkube.resources.core_v1 import ConfigMap

from compute_domains.infra import backoff
from compute_domains.infra.kube import watch
from tests.unit.infra.kubefakes import ScriptedClient, api_error, cm

FAST = backoff.Backoff(initial=0.001, maximum=0.01)


async def _first(client: ScriptedClient, n: int) -> list[Any]:
    out: list[Any] = []
    stream = watch.stream(client, ConfigMap, name="t", retry=FAST, rng=random.Random(1))
    async for item in stream:
        out.append(item)
        if len(out) == n:
            break
    await stream.aclose()  # type: ignore[attr-defined]
    return out


def _summary(items: list[Any]) -> list[str]:
    return [
        f"list@{i.version}:{','.join(o.metadata.name for o in i.objects)}"
        if isinstance(i, watch.Listed)
        else f"{i.type}:{i.obj.metadata.name}@{i.obj.metadata.resourceVersion}"
        for i in items
    ]


async def test_a_cleanly_ended_watch_resumes_from_the_last_version_without_a_relist() -> None:
    client = ScriptedClient(
        lists=[([cm("a", "1")], "5")],
        watches=[[("MODIFIED", cm("a", "7")), "END"], [("ADDED", cm("b", "8"))]],
    )
    items = await _first(client, 3)
    assert _summary(items) == ["list@5:a", "MODIFIED:a@7", "ADDED:b@8"]
    assert client.watch_versions == ["5", "7"]
    assert client.list_calls == 1


async def test_an_expired_version_relists_and_watches_from_the_new_list() -> None:
    client = ScriptedClient(
        lists=[([cm("a", "1")], "5"), ([cm("a", "1"), cm("b", "20")], "21")],
        watches=[[api_error(410, "Expired", "too old resource version")], []],
    )
    items = await _first(client, 2)
    assert _summary(items) == ["list@5:a", "list@21:a,b"]
    assert client.list_calls == 2


async def test_other_failures_relist_after_a_backoff() -> None:
    client = ScriptedClient(
        lists=[
            api_error(503, "ServiceUnavailable"),
            ([cm("a", "1")], "5"),
            ([], "9"),
        ],
        watches=[[api_error(500, "InternalError")], []],
    )
    items = await _first(client, 2)
    assert _summary(items) == ["list@5:a", "list@9:"]
    assert client.watch_versions == ["5"]
