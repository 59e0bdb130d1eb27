"""The Ready report's JSON patch against the real API server: it changes our entry's status and
nothing else without a resourceVersion, and once our entry has moved its ``test`` fails with 422,
which the membership answers with a fresh read and a new patch (``membership._report_loop``).
"""

from __future__ import annotations

import dataclasses

import httpx2 as httpx
import pytest
from lightkube import AsyncClient
from lightkube.types import PatchType

from compute_domains.api.clique import (
    CliqueDaemon,
    ComputeDomainClique,
    ComputeDomainCliqueResource,
)
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import cliqueentry
from compute_domains.daemon.config import Identity
from compute_domains.infra import kube

pytestmark = pytest.mark.integration

CLIQUE_ID = "5b1c0d6e-0000-4000-8000-000000000001.7"


async def test_the_status_patch_needs_no_version_and_fails_once_our_entry_moved(
    admin: AsyncClient, driver_ns: str
) -> None:
    me = Identity(
        node_name="n1",
        pod_name="daemon-n1",
        pod_namespace=driver_ns,
        pod_uid="uid-n1",
        pod_ip="10.0.0.1",
        clique_id=CLIQUE_ID,
        domain_uid="cd-uid",
    )
    other = CliqueDaemon(node_name="a", ip_address="10.0.0.10", clique_id=CLIQUE_ID, index=0)
    empty = ComputeDomainClique.new(domain_uid="cd-uid", clique_id=CLIQUE_ID, namespace=driver_ns)
    with_other = dataclasses.replace(empty, daemons=(other,))
    ours = with_other.with_registered(me.node_name, me.pod_ip, 4)  # as the controller adds us
    created = ComputeDomainClique.from_resource(await admin.create(ours.to_resource()))
    ops = cliqueentry.status_patch(created, me, Readiness.READY)
    assert ops is not None

    # Another writer's change lands first: a full update with our version would now conflict,
    # the patch does not.
    bumped = created.metadata.to_dict()
    bumped["labels"] = {**bumped["labels"], "touched": "yes"}
    await admin.replace(ComputeDomainCliqueResource(**{**created.to_dict(), "metadata": bumped}))
    name, ns = me.clique_name, driver_ns
    raw = await admin.patch(
        ComputeDomainCliqueResource, name, ops, namespace=ns, patch_type=PatchType.JSON
    )
    patched = ComputeDomainClique.from_resource(raw)
    assert patched.daemon("n1") == dataclasses.replace(created.daemons[1], status=Readiness.READY)
    assert patched.daemon("a") == other

    # The other entry leaves: ours moves to position 0, and the old patch's test fails.
    gone = dataclasses.replace(patched, daemons=patched.daemons[1:])
    await admin.replace(gone.to_resource())
    with pytest.raises(httpx.HTTPStatusError) as failed:
        await admin.patch(
            ComputeDomainCliqueResource, name, ops, namespace=ns, patch_type=PatchType.JSON
        )
    assert kube.code_of(failed.value) == 422
    left = ComputeDomainClique.from_resource(
        await admin.get(ComputeDomainCliqueResource, name, namespace=ns)
    )
    assert [d.node_name for d in left.daemons] == ["n1"]
