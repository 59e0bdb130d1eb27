"""The informer's list/watch loop survives API trouble: errors, expired versions, reconnects."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.core.internal_models import meta_v1
from lightkube.resources.core_v1 import ConfigMap

from compute_domains.controller import informer, kubeapi, metrics
from compute_domains.infra import backoff


def _cm(name: str, rv: str) -> ConfigMap:
    return ConfigMap.from_dict(
        {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}
    )


class _Listing:
    def __init__(self, step: Any) -> None:
        self._step = step
        self.resourceVersion = ""

    async def __aiter__(self) -> AsyncIterator[ConfigMap]:
        if isinstance(self._step, Exception):
            raise self._step
        items, self.resourceVersion = self._step
        for item in items:
            yield item


class _ScriptedClient:
    """Answers list and watch calls from a script, as an API server having a bad day would."""

    def __init__(self, lists: list[Any], watches: list[list[Any]]) -> None:
        self.lists = lists
        self.watches = watches
        self.watch_versions: list[str] = []

    def list(self, *_args: Any, **_kw: Any) -> _Listing:
        return _Listing(self.lists.pop(0))

    async def watch(self, *_args: Any, resource_version: str, **_kw: Any) -> AsyncIterator[Any]:
        self.watch_versions.append(resource_version)
        script = self.watches.pop(0) if self.watches else []
        for step in script:
            if isinstance(step, Exception):
                raise step
            yield step
        await asyncio.Event().wait()  # a quiet, open watch


async def test_recovers_from_errors_and_expired_watches() -> None:
    gone = ApiError(status=meta_v1.Status(code=410, message="too old resource version"))
    client = _ScriptedClient(
        lists=[
            httpx.ConnectError("api server restarting"),
            ([_cm("a", "1")], "5"),
            ([_cm("a", "6"), _cm("b", "8")], "9"),
        ],
        watches=[[("MODIFIED", _cm("a", "6")), gone]],
    )
    changes: list[tuple[Any, Any]] = []
    inf = informer.Informer(
        kubeapi.Api(cast(AsyncClient, client), metrics.Metrics()),
        ConfigMap,
        name="scripted",
        on_change=lambda old, new: changes.append((old, new)),
        relist_backoff=backoff.Backoff(initial=0.001, maximum=0.01),
    )
    task = asyncio.create_task(inf.run())
    try:
        await asyncio.wait_for(inf.synced.wait(), 2)
        async with asyncio.timeout(2):
            while inf.get("ns", "b") is None:
                await asyncio.sleep(0.005)
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
