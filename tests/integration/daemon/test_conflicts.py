"""A lost clique write race (409) is expected: counted, logged at debug level only, retried.

The daemon's membership runs in this process against the sim's API server. The clique exists
already (another daemon created it), so joining it is an update; another writer changes the
clique right before that update reaches the server (a client that does that write first, then
passes the update on), so the API server answers a real 409 Conflict. (The later Ready report is
a JSON patch of our own entry, which needs no resourceVersion and cannot be raced this way.)
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import events, membership, metrics
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff
from tests.integration.daemon import pods
from tests.integration.daemon.pods import NODES

pytestmark = pytest.mark.integration


class _RacedClient:
    """The API client, except that before the first clique update passes through, another
    writer changes that clique (so the update carries a stale resourceVersion)."""

    def __init__(self, inner: AsyncClient) -> None:
        self._inner = inner
        self.raced = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def replace(self, obj: Any, **kw: Any) -> Any:
        if not self.raced:
            self.raced += 1
            bump = {"metadata": {"annotations": {"test/other-writer": "was here"}}}
            await self._inner.patch(
                ComputeDomainCliqueResource,
                obj.metadata.name,
                bump,
                namespace=obj.metadata.namespace,
                patch_type=PatchType.MERGE,
            )
        return await self._inner.replace(obj, **kw)


async def _anchor_pod(admin: AsyncClient, ns: str) -> Pod:
    """A pod that exists but never runs: the clique's owner, so the garbage collector keeps it."""
    return await admin.create(
        Pod.from_dict(
            {
                "metadata": {"name": "anchor", "namespace": ns},
                "spec": {
                    "nodeSelector": {"test/never": "true"},
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                },
            }
        )
    )


async def test_a_lost_update_race_is_counted_and_logged_at_debug_level(
    admin: AsyncClient, driver_ns: str, compute_domain: Any, caplog: pytest.LogCaptureFixture
) -> None:
    anchor = await _anchor_pod(admin, driver_ns)
    ident = Identity(
        node_name=NODES[0],
        pod_name="anchor",
        pod_namespace=driver_ns,
        pod_uid=str(anchor.metadata.uid),  # type: ignore[union-attr]
        pod_ip="10.9.0.1",
        clique_id=await pods.node_clique(admin, NODES[0]),
        domain_uid=str(compute_domain.metadata.uid),
        domain_name=compute_domain.metadata.name,
        domain_namespace=driver_ns,
    )
    # Another daemon created the clique: our join is a full update with a resourceVersion.
    await admin.create(
        ComputeDomainClique.new(
            domain_uid=ident.domain_uid, clique_id=ident.clique_id, namespace=driver_ns
        ).to_resource()
    )
    raced = _RacedClient(admin)
    meter = metrics.DaemonMetrics()
    member = membership.Membership(
        raced,  # type: ignore[arg-type]
        ident,
        max_nodes=3,
        retry=backoff.Backoff(initial=0.05, maximum=0.5),
        recorder=events.PodEvents(admin, ident),
        on_peers=lambda _mapping: None,
        meter=meter,
    )

    def ready(clique: ComputeDomainClique) -> bool:
        mine = clique.daemon(NODES[0])
        return mine is not None and mine.status is Readiness.READY

    with caplog.at_level(logging.DEBUG, logger=membership.__name__):
        task = asyncio.create_task(member.run())
        try:
            # The join, which the other writer races, is retried on the fresh state.
            await pods.wait_clique(
                admin, driver_ns, ident.clique_name, lambda c: c.daemon(NODES[0]) is not None
            )
            member.set_status(Readiness.READY)
            clique = await pods.wait_clique(admin, driver_ns, ident.clique_name, ready)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    assert raced.raced == 1
    stored = await admin.get(ComputeDomainCliqueResource, ident.clique_name, namespace=driver_ns)
    assert "test/other-writer" in (stored.metadata.annotations or {}), "the race was real"
    assert clique.daemon(NODES[0]) is not None
    conflicts = "compute_domains_daemon_clique_conflicts_total"
    assert meter.clique_conflicts == {"create": 0, "update": 1}
    page = meter.render().decode()
    assert f'{conflicts}{{verb="update"}} 1.0' in page
    assert f'{conflicts}{{verb="create"}} 0.0' in page
    lines = [r for r in caplog.records if "409" in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.DEBUG], [r.getMessage() for r in lines]
    louder = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert not [m for m in louder if "clique sync" in m or "onflict" in m], louder
