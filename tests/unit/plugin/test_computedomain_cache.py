"""A virtual node's plugin reads its ComputeDomains and cliques from its host's shared caches."""

from __future__ import annotations

import asyncio
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
