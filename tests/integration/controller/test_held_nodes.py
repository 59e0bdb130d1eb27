"""The controller re-places pods whose channel claim landed on a node another CD holds (issue 29).

Driven through the real API server with hand-made objects standing in for the scheduler and
the kubelet plugin: the node label and the ResourceSlice holder attribute a plugin writes at
the first prepare, claims allocated and reserved as the scheduler leaves them, pods bound to
nodes without a kubelet (so they stay Pending, and an evicted one stays Terminating).

- Cross-holding, the deadlock of issue 29: CD A holds n1 and CD B holds n2, and each has a pod
  (owned by a controller, its claim its own) waiting on the other's node. Both are evicted,
  with a ``PodReplaced`` Warning on the pod and on its CD naming the holder; the holders' own
  pods are left alone.
- A pod without an owner cannot move: it is not deleted, and gets a
  ``NodeHeldByAnotherComputeDomain`` Warning (pod and CD) naming the holder and why it waits;
  its CD's Ready condition names the holder and the waiting pod.
- No eviction before the node's slice advertises its holder (else the scheduler could put the
  new pod's claim on the same node again): the pod is evicted only once the slice says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from compute_domains.api import names
from compute_domains.api.computedomain import ComputeDomainResource
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.timeout(240)
T = TypeVar("T")


def _slice_body(node: str, holder: str) -> dict[str, Any]:
    attrs: dict[str, Any] = {"type": {"string": names.CHANNEL_DEVICE_TYPE}, "id": {"int": 0}}
    if holder:
        attrs[names.CHANNEL_HOLDER_ATTRIBUTE] = {"string": holder}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{names.DRIVER_NAME}"},
        "spec": {
            "driver": names.DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "channel-0", "attributes": attrs}],
        },
    }


async def _hold(client: AsyncClient, node: str, holder: str, *, advertise: bool = True) -> None:
    """What the plugin does at a CD's first prepare: label the node, republish its slice."""
    await client.patch(Node, node, {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: holder}}})
    body = _slice_body(node, holder if advertise else "")
    with contextlib.suppress(ApiError):
        await client.delete(ResourceSlice, body["metadata"]["name"])
    await client.create(ResourceSlice.from_dict(body))


async def _pod(client: AsyncClient, ns: str, name: str, *, node: str, owned: bool) -> Pod:
    """A workload pod bound to ``node``; ``owned``: controlled by a ConfigMap (a stand-in
    for a ReplicaSet: any controller kind but DaemonSet recreates a deleted pod elsewhere)."""
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if owned:
        meta["ownerReferences"] = [await objects.owner_ref(client, ns)]
    body = {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    return await client.create(Pod.from_dict(body))


async def _claim_of(
    client: AsyncClient, ns: str, pod: Pod, *, domain_uid: str, node: str
) -> ResourceClaim:
    """A claim of CD ``domain_uid`` made for ``pod`` from a template (the pod owns it),
    allocated on ``node`` and reserved for the pod, as the scheduler leaves it."""
    assert pod.metadata is not None
    name = f"{pod.metadata.name}-cd"
    return await objects.workload_claim(
        client, ns, name, domain_uid=domain_uid, node=node, pod=pod, owned=True
    )


async def _events(client: AsyncClient, ns: str, uid: str, reason: str) -> list[Event]:
    return [
        e
        async for e in client.list(Event, namespace=ns)
        if e.involvedObject.uid == uid and e.reason == reason
    ]


async def _until(check: Callable[[], Awaitable[T]], what: str, timeout: float = 60) -> T:
    """``check()``'s first truthy result, polled (Events have no watchable name to wait on)."""
    end = time.monotonic() + timeout
    while not (got := await check()):
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.2)
    return got


def _evicted(p: Pod) -> bool:
    return p.metadata is not None and p.metadata.deletionTimestamp is not None


@contextlib.asynccontextmanager
async def _nodes(client: AsyncClient, count: int) -> AsyncIterator[list[str]]:
    made = [f"held-{uuid.uuid4().hex[:6]}" for _ in range(count)]
    async with objects.nodes(client, *made):
        try:
            yield made
        finally:
            for node in made:
                with contextlib.suppress(ApiError):
                    await client.delete(ResourceSlice, f"{node}-{names.DRIVER_NAME}")


async def test_cross_held_nodes_both_losers_are_replaced(
    client: AsyncClient, user_ns: str, start_controller: StartController
) -> None:
    """A holds n1, B holds n2, each has a pod waiting on the other's node: both re-placed."""
    async with _nodes(client, 2) as (n1, n2):
        a = (await objects.create_cd(client, "cd-a", user_ns, "a-rct")).metadata.uid
        b = (await objects.create_cd(client, "cd-b", user_ns, "b-rct")).metadata.uid
        await _hold(client, n1, a)
        await _hold(client, n2, b)
        pods = {}
        for name, cd, node in (("a-0", a, n1), ("b-1", b, n1), ("b-0", b, n2), ("a-1", a, n2)):
            pods[name] = await _pod(client, user_ns, name, node=node, owned=True)
            await _claim_of(client, user_ns, pods[name], domain_uid=cd, node=node)
        await start_controller()

        for loser, node, holder in (("b-1", n1, "cd-a"), ("a-1", n2, "cd-b")):
            await wait_for(client, Pod, loser, _evicted, namespace=user_ns, timeout=60)
            uid = str(pods[loser].metadata.uid)  # type: ignore[union-attr]
            (event,) = await _events(client, user_ns, uid, "PodReplaced")
            assert event.type == "Warning"
            assert f"node {node} is held by ComputeDomain {user_ns}/{holder}" in str(event.message)
            assert "re-placed so the scheduler can choose a free node" in str(event.message)
        for cd_name, cd_uid in (("cd-a", a), ("cd-b", b)):
            on_cd = await _events(client, user_ns, str(cd_uid), "PodReplaced")
            assert len(on_cd) == 1, f"{cd_name}: {[e.message for e in on_cd]}"
        for holder_pod in ("a-0", "b-0"):
            p = await client.get(Pod, holder_pod, namespace=user_ns)
            assert not _evicted(p), f"{holder_pod} holds its node and must stay"


async def test_ownerless_pod_waits_with_a_warning(
    client: AsyncClient, user_ns: str, start_controller: StartController
) -> None:
    """A pod without a controller cannot move: it stays, and the Event says who holds the node."""
    async with _nodes(client, 1) as (n1,):
        a = (await objects.create_cd(client, "cd-a", user_ns, "a-rct")).metadata.uid
        b = (await objects.create_cd(client, "cd-b", user_ns, "b-rct")).metadata.uid
        await _hold(client, n1, a)
        lone = await _pod(client, user_ns, "lone", node=n1, owned=False)
        await _claim_of(client, user_ns, lone, domain_uid=b, node=n1)
        await start_controller()

        uid = str(lone.metadata.uid)  # type: ignore[union-attr]

        async def warned() -> list[Event]:
            return await _events(client, user_ns, uid, "NodeHeldByAnotherComputeDomain")

        found = await _until(warned, "a NodeHeldByAnotherComputeDomain Event on the pod")
        message = str(found[0].message)
        assert f"node {n1} is held by ComputeDomain {user_ns}/cd-a" in message, message
        assert "no controller to recreate it" in message, message
        on_cd = await _events(client, user_ns, str(b), "NodeHeldByAnotherComputeDomain")
        assert on_cd and f"pod {user_ns}/lone" in str(on_cd[0].message)
        # WAIT never evicts, and the Event is written after the decision: this is final.
        assert not _evicted(await client.get(Pod, "lone", namespace=user_ns))

        # cd-b's status names the holder and the waiting pod, not its own daemons.
        def names_the_holder(cd: Any) -> bool:
            ready = [
                c for c in (cd.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"
            ]
            message = ready[0]["message"] if ready else ""
            return (
                f"node {n1}: held by ComputeDomain {user_ns}/cd-a" in message
                and f"{user_ns}/lone waiting there" in message
            )

        await wait_for(client, ComputeDomainResource, "cd-b", names_the_holder, namespace=user_ns)


async def test_no_eviction_before_the_slice_advertises_the_holder(
    client: AsyncClient,
    user_ns: str,
    start_controller: StartController,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The node is labelled but its slice shows no holder yet: the loser waits for the slice."""
    caplog.set_level(logging.INFO, logger="compute_domains.controller.replacer")
    async with _nodes(client, 1) as (n1,):
        a = (await objects.create_cd(client, "cd-a", user_ns, "a-rct")).metadata.uid
        b = (await objects.create_cd(client, "cd-b", user_ns, "b-rct")).metadata.uid
        await _hold(client, n1, a, advertise=False)
        loser = await _pod(client, user_ns, "b-0", node=n1, owned=True)
        await _claim_of(client, user_ns, loser, domain_uid=b, node=n1)
        await start_controller()

        async def looked() -> bool:
            return any("does not advertise holder" in r.getMessage() for r in caplog.records)

        await _until(looked, "the replacer waiting for the slice")
        assert not _evicted(await client.get(Pod, "b-0", namespace=user_ns))
        await _hold(client, n1, a)
        await wait_for(client, Pod, "b-0", _evicted, namespace=user_ns, timeout=60)
