"""A clique deleted under a registered daemon: created again while its CD lives, not once the CD
is being deleted or gone (the CD's teardown deletes its cliques while its daemons still run; 18
daemons re-creating and re-joining one cost ~70 writes for nothing, issue 17 point 3).

The daemon's membership runs in this process against the sim's API server (as in
``test_conflicts``); a pod that never runs owns the clique so the garbage collector keeps it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.daemon import events, membership
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff
from tests.integration.daemon import pods
from tests.integration.daemon.pods import NODES
from tests.integration.daemon.test_conflicts import _anchor_pod
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration


async def test_a_deleted_clique_is_created_again_only_while_its_cd_lives(
    admin: AsyncClient, driver_ns: str, compute_domain: Any, caplog: pytest.LogCaptureFixture
) -> None:
    anchor = await _anchor_pod(admin, driver_ns)
    ident = Identity(
        node_name=NODES[0],
        pod_name="anchor",
        pod_namespace=driver_ns,
        pod_uid=str(anchor.metadata.uid),  # type: ignore[union-attr]
        pod_ip="10.9.1.1",
        clique_id=await pods.node_clique(admin, NODES[0]),
        domain_uid=str(compute_domain.metadata.uid),
        domain_name=compute_domain.metadata.name,
        domain_namespace=driver_ns,
    )
    member = membership.Membership(
        admin,
        ident,
        max_nodes=3,
        retry=backoff.Backoff(initial=0.05, maximum=0.5),
        recorder=events.PodEvents(admin, ident),
        on_peers=lambda _mapping: None,
    )

    async def delete_clique() -> None:
        await admin.delete(ComputeDomainCliqueResource, ident.clique_name, namespace=driver_ns)

    def registered(c: ComputeDomainClique) -> bool:
        return c.daemon(NODES[0]) is not None

    with caplog.at_level(logging.INFO, logger=membership.__name__):
        task = asyncio.create_task(member.run())
        try:
            first = await wait_for(
                admin,
                ComputeDomainCliqueResource,
                ident.clique_name,
                lambda r: registered(ComputeDomainClique.from_resource(r)),
                namespace=driver_ns,
            )
            # The CD lives: a deleted clique is repaired, our entry on its index again.
            await delete_clique()
            again = await wait_for(
                admin,
                ComputeDomainCliqueResource,
                ident.clique_name,
                lambda r: (
                    r.metadata.uid != first.metadata.uid
                    and registered(ComputeDomainClique.from_resource(r))
                ),
                namespace=driver_ns,
            )
            index = ComputeDomainClique.from_resource(first).daemon(NODES[0])
            assert index is not None
            entry = ComputeDomainClique.from_resource(again).daemon(NODES[0])
            assert entry is not None and entry.index == index.index

            # The CD is gone (its teardown deletes the clique): the clique stays gone.
            await admin.delete(
                ComputeDomainResource, compute_domain.metadata.name, namespace=driver_ns
            )
            await delete_clique()

            async def decided() -> None:
                while not [r for r in caplog.records if "not creating it again" in r.getMessage()]:
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(decided(), 30)
            with pytest.raises(ApiError) as gone:
                await admin.get(ComputeDomainCliqueResource, ident.clique_name, namespace=driver_ns)
            assert gone.value.status.code == 404
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
