"""A plugin reads its ComputeDomains from a watched cache: its host's shared one (a virtual
node, with the cliques) or its own (a plugin in its own process); a fresh list only when the
cache has not listed yet or does not hold the CD."""

from __future__ import annotations

import asyncio
import json
import types
from typing import Any

import pytest

from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.infra import errors
from compute_domains.infra.kube import informers
from compute_domains.plugin import computedomain


class _NoApi:
    """A client that fails the test on any call: every read must come from the cache."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the API was called ({name}) although the cache holds the answer")


def _cd(name: str, ns: str, uid: str, rv: str = "1") -> Any:
    return ComputeDomainResource.from_dict(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": rv},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "t"}}},
            "status": {
                "status": "Ready",
                "nodes": [
                    {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.1", "index": 0},
                ],
            },
        }
    )


def _clique(ready: bool, rv: str) -> Any:
    return ComputeDomainCliqueResource.from_dict(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {"name": "u1.c.1", "namespace": "drv", "resourceVersion": rv},
            "daemons": [
                {
                    "nodeName": "n1",
                    "ipAddress": "10.0.0.1",
                    "cliqueID": "c.1",
                    "index": 0,
                    "status": "Ready" if ready else "NotReady",
                }
            ],
        }
    )


def _domains() -> tuple[computedomain.Domains, informers.Informers]:
    shared = informers.Informers(None)
    domains = computedomain.Domains(
        _NoApi(),  # type: ignore[arg-type]
        node="n1",
        driver_namespace="drv",
        shared=shared,
    )
    for informer in shared.caches():
        informer._replace([])
        informer.synced.set()
    return domains, shared


async def test_a_prepare_finds_its_cd_in_the_cache_without_a_list() -> None:
    domains, shared = _domains()
    cds = shared.informer(ComputeDomainResource)
    cds._apply("ADDED", _cd("a", "team", "u1"))
    cds._apply("ADDED", _cd("b", "other", "u2"))
    cd = await domains.for_channel("u1", "team")
    assert (cd.namespace, cd.name, cd.uid) == ("team", "a", "u1")
    assert cd.status is not None and cd.status.nodes == ()  # entries are not decoded
    assert (await domains.for_daemon("u2")).name == "b"
    with pytest.raises(errors.PermanentError, match="another namespace"):
        await domains.for_channel("u2", "team")  # found in the cache, elsewhere: no list


async def test_readiness_is_awaited_on_the_shared_clique_cache() -> None:
    domains, shared = _domains()
    cds = shared.informer(ComputeDomainResource)
    cds._apply("ADDED", _cd("a", "team", "u1"))
    cliques = computedomain.cliques(shared, "drv")
    assert domains.cliques is cliques
    cliques._apply("ADDED", _clique(False, "2"))
    cd = await domains.for_channel("u1", "team")
    waiting = asyncio.create_task(domains.wait_ready(cd, "c.1", timeout=5))
    await asyncio.sleep(0)
    assert not waiting.done()
    cliques._apply("MODIFIED", _clique(True, "3"))
    await asyncio.wait_for(waiting, 2)


class _Lists:
    """A client that answers LIST (``kube.list_raw``) with ``items`` and counts the calls."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.lists = 0
        self._client = self

    def prepare_request(self, *_args: Any, **_kw: Any) -> None:
        self.lists += 1

    def build_adapter_request(self, request: Any) -> Any:
        return request

    async def send(self, _request: Any) -> Any:
        return types.SimpleNamespace(content=json.dumps({"items": self.items}).encode())

    def raise_for_status(self, _response: Any) -> None:
        return None


def _own(client: Any) -> tuple[computedomain.Domains, Any]:
    watched = computedomain.own_cache(client)
    domains = computedomain.Domains(client, node="n1", driver_namespace="drv", watched=watched)
    return domains, watched


async def test_a_plugin_in_its_own_process_finds_its_cd_in_its_own_watch() -> None:
    # Issue 26 point 6: the list per prepare was an API round trip of up to 2.1 s under load.
    domains, watched = _own(_NoApi())
    watched._replace([_cd("a", "team", "u1"), _cd("b", "other", "u2")])
    watched.synced.set()
    cd = await domains.for_channel("u1", "team")
    assert (cd.namespace, cd.name, cd.uid) == ("team", "a", "u1")
    assert cd.status is not None and cd.status.nodes == ()
    with pytest.raises(errors.PermanentError, match="another namespace"):
        await domains.for_channel("u2", "team")


async def test_a_cd_not_in_the_watch_yet_or_a_watch_not_listed_yet_is_read_fresh() -> None:
    fresh = dict(_cd("new", "team", "u3"))
    client = _Lists([fresh])
    domains, watched = _own(client)
    assert (await domains.for_channel("u3", "team")).name == "new"  # not listed yet
    assert client.lists == 1
    watched._replace([_cd("a", "team", "u1")])
    watched.synced.set()
    assert (await domains.for_channel("u3", "team")).name == "new"  # created a moment ago
    assert client.lists == 2
    assert (await domains.for_channel("u1", "team")).name == "a"
    assert client.lists == 2
    client.items = []
    with pytest.raises(errors.PermanentError, match="not found"):
        await domains.for_channel("u9", "team")
