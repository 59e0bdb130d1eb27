"""Cleanup after crashes: the orphan sweep, deletion with parts missing, self-healing.

A controller "crash" is its task cancelled mid-life; what it would have cleaned up is then
made orphaned by hand (the CD's finalizer forced away). A fresh controller must remove every
object naming a CD that no longer exists, and nothing else.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceClaimTemplate
from lightkube.types import PatchType

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController, stop
from tests.integration.helpers import wait_for

CLIQUE = "c0ffee00-0000-0000-0000-000000000003.2"
GHOST_UID = "00000000-dead-4bad-8bad-000000000000"


async def _absent(client: AsyncClient, res: Any, name: str, ns: str | None) -> None:
    async def check() -> None:
        while True:
            try:
                await client.get(res, name, namespace=ns)
            except ApiError as err:
                if err.status.code == 404:
                    return
                raise
            await asyncio.sleep(0.2)

    await asyncio.wait_for(check(), 60)


async def _exists(client: AsyncClient, res: Any, name: str, ns: str | None) -> Any:
    return await client.get(res, name, namespace=ns)


async def _set_up(client: AsyncClient, name: str, ns: str) -> Any:
    cd = await objects.create_cd(client, name, ns, f"{name}-channel")
    await wait_for(
        client, ComputeDomainResource, name, lambda c: bool(c.get("status")), namespace=ns
    )
    await wait_for(client, ResourceClaimTemplate, f"{name}-channel", lambda _r: True, namespace=ns)
    return cd


async def _force_delete_cd(client: AsyncClient, name: str, ns: str) -> None:
    await client.patch(
        ComputeDomainResource,
        name,
        {"metadata": {"finalizers": None}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )
    await client.delete(ComputeDomainResource, name, namespace=ns)
    await _absent(client, ComputeDomainResource, name, ns)


async def test_sweep_after_crash_removes_orphans_and_nothing_else(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    first = await start_controller()
    orphan = await _set_up(client, "cd-gone", user_ns)
    keep = await _set_up(client, "cd-keep", user_ns)
    uid, keep_uid = orphan.metadata.uid, keep.metadata.uid
    bystander = ResourceClaimTemplate.from_dict(
        {
            "metadata": {"name": "not-ours", "namespace": user_ns},
            "spec": {"spec": {"devices": {"requests": []}}},
        }
    )
    await client.create(bystander)
    n1, n2, n3 = f"o1-{uid[:6]}", f"o2-{uid[:6]}", f"o3-{uid[:6]}"
    async with objects.nodes(client, n1, n2, n3):
        for node, value in ((n1, uid), (n2, GHOST_UID), (n3, keep_uid)):
            await client.patch(
                Node, node, {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: value}}}
            )
        await objects.daemon_pod(
            client, driver_ns, domain_uid=uid, node=n1, ip="10.4.0.1", clique_id=CLIQUE, ready=True
        )
        await objects.register(
            client, driver_ns, domain_uid=uid, clique_id=CLIQUE, node=n1, ip="10.4.0.1", ready=True
        )
        await wait_for(
            client,
            ComputeDomainResource,
            "cd-gone",
            lambda c: (c["status"].get("totalNodes") or 0) == 1,
            namespace=user_ns,
        )

        # Crash, then the CD disappears without the controller's teardown.
        await stop(start_controller.tasks[first])  # type: ignore[attr-defined]
        await _force_delete_cd(client, "cd-gone", user_ns)
        ds_name = names.daemon_object_name(uid)
        assert await _exists(client, DaemonSet, ds_name, driver_ns)

        await start_controller()
        await _absent(client, ResourceClaimTemplate, "cd-gone-channel", user_ns)
        await _absent(client, ResourceClaimTemplate, ds_name, driver_ns)
        await _absent(client, DaemonSet, ds_name, driver_ns)
        await _absent(client, ComputeDomainCliqueResource, f"{uid}.{CLIQUE}", driver_ns)
        for node in (n1, n2):
            await wait_for(
                client,
                Node,
                node,
                lambda n: names.COMPUTE_DOMAIN_LABEL not in (n.metadata.labels or {}),
            )

        # What belongs to others survived.
        untouched = await client.get(ResourceClaimTemplate, "not-ours", namespace=user_ns)
        assert not untouched.metadata.finalizers and not untouched.metadata.labels
        assert await _exists(client, ResourceClaimTemplate, "cd-keep-channel", user_ns)
        assert await _exists(client, DaemonSet, names.daemon_object_name(keep_uid), driver_ns)
        kept = await client.get(Node, n3)
        assert kept.metadata.labels[names.COMPUTE_DOMAIN_LABEL] == keep_uid


async def test_missing_daemonset_does_not_block_deletion(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    first = await start_controller()
    cd = await _set_up(client, "cd-half", user_ns)
    uid = cd.metadata.uid
    ds_name = names.daemon_object_name(uid)
    await wait_for(client, DaemonSet, ds_name, lambda _d: True, namespace=driver_ns)
    await stop(start_controller.tasks[first])  # type: ignore[attr-defined]

    # While no controller runs: the DaemonSet vanishes, then the CD is deleted.
    await client.patch(DaemonSet, ds_name, {"metadata": {"finalizers": None}}, namespace=driver_ns)
    await client.delete(DaemonSet, ds_name, namespace=driver_ns)
    await _absent(client, DaemonSet, ds_name, driver_ns)
    await client.delete(ComputeDomainResource, "cd-half", namespace=user_ns)

    await start_controller()
    await _absent(client, ComputeDomainResource, "cd-half", user_ns)
    await _absent(client, ResourceClaimTemplate, ds_name, driver_ns)
    await _absent(client, ResourceClaimTemplate, "cd-half-channel", user_ns)


async def test_objects_deleted_by_hand_are_recreated(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    cd = await _set_up(client, "cd-heal", user_ns)
    ds_name = names.daemon_object_name(cd.metadata.uid)
    before = await wait_for(client, DaemonSet, ds_name, lambda _d: True, namespace=driver_ns)
    rct_before = await client.get(ResourceClaimTemplate, "cd-heal-channel", namespace=user_ns)
    await client.delete(DaemonSet, ds_name, namespace=driver_ns)
    await client.delete(ResourceClaimTemplate, "cd-heal-channel", namespace=user_ns)
    after = await wait_for(
        client,
        DaemonSet,
        ds_name,
        lambda d: d.metadata.uid != before.metadata.uid and d.metadata.deletionTimestamp is None,
        namespace=driver_ns,
    )
    assert after.metadata.finalizers == [names.FINALIZER]
    await wait_for(
        client,
        ResourceClaimTemplate,
        "cd-heal-channel",
        lambda r: r.metadata.uid != rct_before.metadata.uid,
        namespace=user_ns,
    )
