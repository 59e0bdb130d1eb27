"""The node's CD mark as an annotation (decision 0026) in the controller, against the real API
server: a CD's deletion and the orphan sweep remove it as they remove the label, and only the
deleted CD's (a mark of a live CD, in either form, stays)."""

from __future__ import annotations

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from compute_domains.api import names, nodemark
from compute_domains.api.computedomain import ComputeDomainResource
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController, stop
from tests.integration.controller.test_cleanup import GHOST_UID, _absent, _force_delete_cd
from tests.integration.helpers import wait_for

KEY = names.COMPUTE_DOMAIN_LABEL


def _unmarked(node: Node) -> bool:
    return nodemark.domain_of(node.metadata) == ""


async def _cd(client: AsyncClient, name: str, ns: str) -> str:
    cd = await objects.create_cd(client, name, ns, f"{name}-channel")
    await wait_for(
        client, ComputeDomainResource, name, lambda c: bool(c.get("status")), namespace=ns
    )
    await wait_for(client, ResourceClaimTemplate, f"{name}-channel", lambda _r: True, namespace=ns)
    return str(cd.metadata.uid)


async def test_deleting_a_cd_removes_its_annotation_mark_and_leaves_others(
    client: AsyncClient, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    gone = await _cd(client, "cd-am", user_ns)
    keep = await _cd(client, "cd-ak", user_ns)
    n1, n2, n3 = (f"m{i}-{gone[:6]}" for i in (1, 2, 3))
    async with objects.nodes(client, n1, n2, n3):
        await client.patch(Node, n1, {"metadata": {"annotations": {KEY: gone}}})
        await client.patch(Node, n2, {"metadata": {"annotations": {KEY: keep}}})
        await client.patch(Node, n3, {"metadata": {"labels": {KEY: keep}}})
        await client.delete(ComputeDomainResource, "cd-am", namespace=user_ns)
        await _absent(client, ComputeDomainResource, "cd-am", user_ns)
        await wait_for(client, Node, n1, _unmarked, timeout=60)
        assert nodemark.domain_of((await client.get(Node, n2)).metadata) == keep
        assert nodemark.domain_of((await client.get(Node, n3)).metadata) == keep


async def test_the_orphan_sweep_removes_annotation_marks_of_cds_that_are_gone(
    client: AsyncClient, user_ns: str, start_controller: StartController
) -> None:
    first = await start_controller()
    orphan = await _cd(client, "cd-ao", user_ns)
    keep = await _cd(client, "cd-ap", user_ns)
    n1, n2, n3 = (f"o{i}-{orphan[:6]}" for i in (1, 2, 3))
    async with objects.nodes(client, n1, n2, n3):
        await stop(start_controller.tasks[first])  # type: ignore[attr-defined]
        for node, value in ((n1, orphan), (n2, GHOST_UID), (n3, keep)):
            await client.patch(Node, node, {"metadata": {"annotations": {KEY: value}}})
        await _force_delete_cd(client, "cd-ao", user_ns)

        await start_controller()
        for node in (n1, n2):
            await wait_for(client, Node, node, _unmarked, timeout=60)
        kept = await client.get(Node, n3)
        assert (kept.metadata.annotations or {}).get(KEY) == keep  # type: ignore[union-attr]
