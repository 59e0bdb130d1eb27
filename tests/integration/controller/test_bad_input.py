"""Bad input: rejected by the API server (CRD schema/CEL), or reported without harm.

Schema-level mistakes never reach the controller: the API server rejects them with a message
naming the field. Conflicts only visible at run time (a template name already taken) become a
Warning Event, a NotReady status whose Ready condition says ``TemplateConflict``, and retries
with backoff, while the controller keeps serving every other CD and never touches the object
that is not its own.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Event
from lightkube.resources.resource_v1 import ResourceClaimTemplate
from lightkube.types import PatchType

from compute_domains.api import names
from compute_domains.api.computedomain import ComputeDomainResource
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController
from tests.integration.helpers import wait_for


def _raw_cd(ns: str, name: str, spec: Any) -> Any:
    body: dict[str, Any] = {
        "apiVersion": names.API_VERSION,
        "kind": names.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name, "namespace": ns},
    }
    if spec is not None:
        body["spec"] = spec
    return ComputeDomainResource.from_dict(body)


def _channel(name: str, mode: str | None = None) -> dict[str, Any]:
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": name}}
    if mode is not None:
        channel["allocationMode"] = mode
    return {"channel": channel}


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (None, "spec"),
        (_channel("Bad_Name"), "spec.channel.resourceClaimTemplate.name"),
        (_channel("a" * 254), "spec.channel.resourceClaimTemplate.name"),
        (_channel("ok-name", mode="Some"), "spec.channel.allocationMode"),
        ({**_channel("ok-name"), "numNodes": -1}, "spec.numNodes"),
        ({"numNodes": 1}, "spec.channel"),
    ],
    ids=[
        "no-spec",
        "invalid-name",
        "name-too-long",
        "unknown-mode",
        "negative-nodes",
        "no-channel",
    ],
)
async def test_api_server_rejects_invalid_specs(
    client: AsyncClient, user_ns: str, spec: Any, fragment: str
) -> None:
    with pytest.raises(ApiError) as raised:
        await client.create(_raw_cd(user_ns, "bad", spec))
    assert raised.value.status.code == 422
    assert fragment in (raised.value.status.message or "")


async def test_spec_is_immutable(client: AsyncClient, user_ns: str) -> None:
    await client.create(_raw_cd(user_ns, "frozen", _channel("frozen-channel")))
    with pytest.raises(ApiError) as raised:
        await client.patch(
            ComputeDomainResource,
            "frozen",
            {"spec": {"numNodes": 3}},
            namespace=user_ns,
            patch_type=PatchType.MERGE,
        )
    assert raised.value.status.code == 422
    assert "immutable" in (raised.value.status.message or "")


async def _event(client: AsyncClient, ns: str, uid: str, reason: str) -> Any:
    async def poll() -> Any:
        while True:
            async for e in client.list(Event, namespace=ns):
                if e.involvedObject.uid == uid and e.reason == reason:
                    return e
            await asyncio.sleep(0.25)

    return await asyncio.wait_for(poll(), 60)


async def test_template_name_taken_by_a_foreign_object(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    foreign = ResourceClaimTemplate.from_dict(
        {
            "metadata": {"name": "taken", "namespace": user_ns, "labels": {"owner": "someone"}},
            "spec": {"spec": {"devices": {"requests": []}}},
        }
    )
    await client.create(foreign)
    await start_controller()
    cd = await objects.create_cd(client, "cd-c", user_ns, "taken")
    uid = cd.metadata.uid

    event = await _event(client, user_ns, uid, "TemplateNameConflict")
    assert event.type == "Warning" and "taken" in event.message
    # Everything else of that CD still happens, and other CDs are served meanwhile.
    await wait_for(
        client, DaemonSet, names.daemon_object_name(uid), lambda _d: True, namespace=driver_ns
    )
    cdo = await wait_for(
        client, ComputeDomainResource, "cd-c", lambda c: bool(c.get("status")), namespace=user_ns
    )
    assert cdo["status"]["status"] == "NotReady"
    (ready,) = cdo["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == (
        "Ready",
        "False",
        "TemplateConflict",
    )
    assert ready["message"] == (
        f"ResourceClaimTemplate {user_ns}/taken already exists and does not belong to this "
        "ComputeDomain; rename one of them"
    )
    await objects.create_cd(client, "cd-ok", user_ns, "cd-ok-channel")
    await wait_for(
        client, ResourceClaimTemplate, "cd-ok-channel", lambda _r: True, namespace=user_ns
    )

    # Deleting the conflicting CD completes and leaves the foreign template as it was.
    await client.delete(ComputeDomainResource, "cd-c", namespace=user_ns)

    async def gone() -> None:
        while True:
            try:
                await client.get(ComputeDomainResource, "cd-c", namespace=user_ns)
            except ApiError:
                return
            await asyncio.sleep(0.2)

    await asyncio.wait_for(gone(), 60)
    still = await client.get(ResourceClaimTemplate, "taken", namespace=user_ns)
    assert still.metadata.labels == {"owner": "someone"}
    assert not still.metadata.finalizers and still.metadata.deletionTimestamp is None


async def test_second_cd_naming_the_same_template(
    client: AsyncClient, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    first = await objects.create_cd(client, "cd-one", user_ns, "shared")
    rct = await wait_for(
        client, ResourceClaimTemplate, "shared", lambda _r: True, namespace=user_ns
    )
    assert rct.metadata.labels[names.COMPUTE_DOMAIN_LABEL] == first.metadata.uid
    second = await objects.create_cd(client, "cd-two", user_ns, "shared")
    await _event(client, user_ns, second.metadata.uid, "TemplateNameConflict")

    # When the first CD goes, its template goes, and the second CD gets the name on a retry.
    await client.delete(ComputeDomainResource, "cd-one", namespace=user_ns)
    taken_over = await wait_for(
        client,
        ResourceClaimTemplate,
        "shared",
        lambda r: (r.metadata.labels or {}).get(names.COMPUTE_DOMAIN_LABEL) == second.metadata.uid,
        namespace=user_ns,
        timeout=120,
    )
    assert taken_over.metadata.finalizers == [names.FINALIZER]
    # ... and its status no longer says TemplateConflict.
    await wait_for(
        client,
        ComputeDomainResource,
        "cd-two",
        lambda c: [x["reason"] for x in c["status"].get("conditions") or []] == ["NoWorkload"],
        namespace=user_ns,
    )


async def test_concurrent_writers_do_not_stop_convergence(
    client: AsyncClient, user_ns: str, start_controller: StartController
) -> None:
    """Writes racing the controller's (409 Conflicts on its finalizer patch) are retried."""
    await start_controller()
    await objects.create_cd(client, "cd-busy", user_ns, "cd-busy-channel")
    for i in range(20):
        await client.patch(
            ComputeDomainResource,
            "cd-busy",
            {"metadata": {"labels": {"touch": str(i)}}},
            namespace=user_ns,
            patch_type=PatchType.MERGE,
        )
    cd = await wait_for(
        client,
        ComputeDomainResource,
        "cd-busy",
        lambda c: names.FINALIZER in (c.metadata.finalizers or []) and bool(c.get("status")),
        namespace=user_ns,
    )
    assert cd["status"]["status"] == "NotReady"  # no workload yet
    assert [c["reason"] for c in cd["status"]["conditions"]] == ["NoWorkload"]
