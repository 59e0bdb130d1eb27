"""One assigner pass writes a CD's cliques side by side, not one API round trip after another,
and skips the cliques nothing changed for.

At 4,608 nodes a per-domain CD has 256 cliques; a pass that created or patched them one after
another held the last clique's entries (registrations, and the status the agents' signals ask
for, decision 0025) behind 255 round trips. The API here is a recording double that answers a
clique's creation only once a second one is in flight (what the real API server does is the
integration tests' subject: ``tests/integration/controller/test_entry_signals.py``).
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any, cast

import pytest
from lightkube.models.core_v1 import PodSpec, PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains import controller
from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.controller import assigner, caches, cliqueindex, kubeapi

pytestmark = pytest.mark.timeout(2)
UID = "0b7c3f6e-1111-2222-3333-444455556666"


def _pod(node: str, clique: str, ip: str) -> Pod:
    at = datetime.datetime(2026, 12, 7, tzinfo=datetime.UTC)
    return Pod(
        metadata=ObjectMeta(
            name=f"agent-{node}",
            uid=f"uid-{node}",
            namespace="ns",
            labels={names.COMPUTE_DOMAIN_LABEL: UID, names.CLIQUE_ID_LABEL: clique},
            creationTimestamp=at,
        ),
        spec=PodSpec(containers=[], nodeName=node),
        status=PodStatus(podIP=ip, phase="Running"),
    )


class _Index:
    def __init__(self, objects: list[Any]) -> None:
        self.objects = objects

    def by_index(self, _index: str, _key: str) -> list[Any]:
        return list(self.objects)

    def get(self, _ns: str, _name: str) -> Any:
        return None  # no clique exists yet: the pass creates them

    def observe(self, _obj: Any) -> None:
        pass


class _Caches:
    """What one pass reads: the CD, its agent pods in two cliques, no DaemonSet, no clique."""

    def __init__(self) -> None:
        self.pods = _Index([_pod("a", "c.1", "10.0.0.1"), _pod("b", "c.2", "10.0.0.2")])
        self.daemonsets = _Index([])
        self.cliques = _Index([])

    def cd(self, _uid: str) -> Any:
        return Pod(metadata=ObjectMeta(name="cd", namespace="user", uid=UID, annotations={}))

    def clique_of(self, raw: Any) -> ComputeDomainClique:
        return ComputeDomainClique.from_resource(raw)


class _Api:
    """Answers a creation only while another one is in flight (a pass that writes one clique
    at a time never gets an answer)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.both = asyncio.Event()

    async def create(self, obj: Any) -> Any:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        if self.in_flight >= 2:
            self.both.set()
        await self.both.wait()
        self.in_flight -= 1
        return obj


async def test_a_pass_writes_its_cliques_side_by_side() -> None:
    settings = controller.ControllerSettings(
        namespace="ns", daemon=controller.DaemonSettings(image="img:1")
    )
    api = _Api()
    writer = assigner.IndexAssigner(
        api=cast(kubeapi.Api, api), cache=cast(caches.Caches, _Caches()), settings=settings
    )
    await asyncio.wait_for(writer.sync(UID), 1.5)
    assert api.most == 2


class _Stored(_Index):
    """A clique cache that keeps what the assigner writes, as the informer's ``observe``."""

    def __init__(self) -> None:
        super().__init__([])
        self.by_name: dict[str, Any] = {}

    def get(self, _ns: str, name: str) -> Any:
        return self.by_name.get(name)

    def observe(self, obj: Any) -> None:
        self.by_name[obj.metadata.name] = obj


class _Answering:
    """Answers every creation at once, and a patch with the object as stored before it."""

    def __init__(self, store: _Stored) -> None:
        self.store = store

    async def create(self, obj: Any) -> Any:
        return obj

    async def patch(self, _res: Any, name: str, *_args: Any, **_kwargs: Any) -> Any:
        return self.store.by_name[name]


async def test_a_pass_skips_the_cliques_nothing_changed_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = controller.ControllerSettings(
        namespace="ns", daemon=controller.DaemonSettings(image="img:1")
    )
    cache = _Caches()
    store = cache.cliques = _Stored()
    writer = assigner.IndexAssigner(
        api=cast(kubeapi.Api, _Answering(store)),
        cache=cast(caches.Caches, cache),
        settings=settings,
    )
    planned: list[str] = []
    real = cliqueindex.assigned

    def counting(clique: Any, *args: Any, **kwargs: Any) -> Any:
        planned.append(clique.clique_id)
        return real(clique, *args, **kwargs)

    monkeypatch.setattr(cliqueindex, "assigned", counting)
    await writer.sync(UID)  # creates both cliques
    await writer.sync(UID)  # plans both from the written objects: nothing to write
    assert sorted(planned) == ["c.1", "c.1", "c.2", "c.2"]
    await writer.sync(UID)  # nothing changed: neither is planned again
    assert len(planned) == 4
    # A pod that changes (a new IP: a replacement) is planned again, its clique only.
    cache.pods.objects[0] = _pod("a", "c.1", "10.0.0.9")
    await writer.sync(UID)
    assert planned[4:] == ["c.1"]
