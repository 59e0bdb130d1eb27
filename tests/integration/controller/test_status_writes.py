"""The controller's writes while a CD forms and while its deletion waits: only what is news.

Issue 17 point 3. A status change that is only progress (an entry turned Ready while the CD
stays ``Forming``) waits for ``status_progress_interval_s``; a verdict change (the CD turns
Ready) is written at once. A waiting deletion names its pods in one ``WaitingForWorkload`` Event
and tells again only when a pod not named before holds a claim, not each time one leaves.

The test plays the daemons, the scheduler and the kubelets as ``test_status`` does. "Not
written" is shown without sleeping: a watch from before the step records every status the API
server stored, and the step ends with a change the controller must write (the CD turns Ready,
the Deleting condition's message changes, the CD is gone).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Event

from compute_domains.api.computedomain import ComputeDomainResource
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController
from tests.integration.helpers import wait_for

CLIQUE = "c0ffee00-0000-0000-0000-000000000002.3"
_INTERVAL = 20.0
"""Long against the steps below (a second or two), short enough for the test to wait out."""


def _nodes(cd: Any) -> dict[str, str]:
    return {n["name"]: n["status"] for n in (cd.get("status") or {}).get("nodes") or []}


async def _record(client: AsyncClient, ns: str, name: str, seen: list[Any], rv: str) -> None:
    """Append every stored version of the CD from ``rv`` on (until cancelled)."""
    async for _op, obj in client.watch(
        ComputeDomainResource, namespace=ns, resource_version=rv, fields={"metadata.name": name}
    ):
        seen.append(obj)


async def _events(client: AsyncClient, ns: str, uid: str, reason: str) -> list[Any]:
    return [
        e
        async for e in client.list(Event, namespace=ns)
        if e.involvedObject.uid == uid and e.reason == reason
    ]


async def test_progress_waits_for_the_interval_and_ready_is_written_at_once(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller(status_progress_interval_s=_INTERVAL)
    cd = await objects.create_cd(client, "cd-pw", user_ns, "cd-pw-channel")
    uid = cd.metadata.uid
    n1, n2 = f"pw1-{uid[:6]}", f"pw2-{uid[:6]}"
    async with objects.nodes(client, n1, n2):
        for i, node in enumerate((n1, n2)):
            pod = await objects.workload_pod(client, user_ns, f"w-{i}", node=node)
            await objects.workload_claim(
                client, user_ns, f"c-{i}", domain_uid=uid, node=node, pod=pod
            )
        # (A second join in a later pass than the first is progress: up to _INTERVAL.)
        placed: Any = await wait_for(
            client,
            ComputeDomainResource,
            "cd-pw",
            lambda c: len(_nodes(c)) == 2,
            namespace=user_ns,
            timeout=_INTERVAL + 30,
        )
        assert _nodes(placed) == {n1: "NotReady", n2: "NotReady"}
        seen: list[Any] = []
        recorder = asyncio.create_task(
            _record(client, user_ns, "cd-pw", seen, placed.metadata.resourceVersion)
        )
        try:
            # n1's daemon turns Ready, n2's registers NotReady: progress only (still Forming).
            for node, ip, up in ((n1, "10.7.0.1", True), (n2, "10.7.0.2", False)):
                await objects.daemon_pod(
                    client, driver_ns, domain_uid=uid, node=node, ip=ip, clique_id=CLIQUE, ready=up
                )
                await objects.register(
                    client, driver_ns, domain_uid=uid, clique_id=CLIQUE, node=node, ip=ip, ready=up
                )
            # n2 turns Ready: the CD's verdict flips, which is written at once.
            loop = asyncio.get_running_loop()
            start = loop.time()
            await objects.set_pod_ready(
                client, driver_ns, f"daemon-{uid[:8]}-{n2}", ip="10.7.0.2", ready=True
            )
            await objects.set_clique_status(
                client, driver_ns, domain_uid=uid, clique_id=CLIQUE, node=n2, ready=True
            )
            ready: Any = await wait_for(
                client,
                ComputeDomainResource,
                "cd-pw",
                lambda c: (c.get("status") or {}).get("status") == "Ready",
                namespace=user_ns,
                timeout=_INTERVAL / 2,
            )
            assert loop.time() - start < _INTERVAL / 2
            assert _nodes(ready) == {n1: "Ready", n2: "Ready"}
            last = ready.metadata.resourceVersion
            while not any(o.metadata.resourceVersion == last for o in seen):
                await asyncio.sleep(0.05)  # the watch delivers what the GET already showed
        finally:
            recorder.cancel()
            with contextlib.suppress(asyncio.CancelledError, ApiError):
                await recorder
        statuses = [((o.get("status") or {}).get("status"), _nodes(o)) for o in seen]
        assert ("NotReady", {n1: "Ready", n2: "NotReady"}) not in statuses, (
            "a progress-only status was written inside the interval"
        )
        assert statuses[-1] == ("Ready", {n1: "Ready", n2: "Ready"})


async def test_a_waiting_deletion_tells_of_new_pods_not_of_leaving_ones(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    cd = await objects.create_cd(client, "cd-wd", user_ns, "cd-wd-channel")
    uid = cd.metadata.uid
    n1, n2 = f"wd1-{uid[:6]}", f"wd2-{uid[:6]}"
    async with objects.nodes(client, n1, n2):
        for i, node in enumerate((n1, n2)):
            pod = await objects.workload_pod(client, user_ns, f"job-{i}", node=node)
            await objects.workload_claim(
                client, user_ns, f"job-{i}-channel", domain_uid=uid, node=node, pod=pod
            )

        def deleting(c: Any) -> str | None:
            conds = (c.get("status") or {}).get("conditions") or []
            found = [x["message"] for x in conds if x["type"] == "Deleting"]
            return found[0] if found else None

        await wait_for(
            client, ComputeDomainResource, "cd-wd", lambda c: len(_nodes(c)) == 2, namespace=user_ns
        )
        await client.delete(ComputeDomainResource, "cd-wd", namespace=user_ns)
        both = await wait_for(
            client,
            ComputeDomainResource,
            "cd-wd",
            lambda c: (deleting(c) or "").count(f"{user_ns}/job-") == 2,
            namespace=user_ns,
        )
        assert deleting(both)
        while not (told := await _events(client, user_ns, uid, "WaitingForWorkload")):
            await asyncio.sleep(0.2)
        assert f"{user_ns}/job-0" in told[0].message and f"{user_ns}/job-1" in told[0].message

        # job-0 ends: the condition follows (progress), no new Event (nothing new to tell).
        await objects.release_claim(client, user_ns, "job-0-channel")
        await wait_for(
            client,
            ComputeDomainResource,
            "cd-wd",
            lambda c: f"{user_ns}/job-0" not in (deleting(c) or f"{user_ns}/job-0"),
            namespace=user_ns,
        )
        # job-1 ends too: the teardown runs, in a later pass than any Event of the one above.
        await objects.release_claim(client, user_ns, "job-1-channel")
        while True:
            try:
                await client.get(ComputeDomainResource, "cd-wd", namespace=user_ns)
            except ApiError as err:
                assert err.status.code == 404
                break
            await asyncio.sleep(0.2)
        after = await _events(client, user_ns, uid, "WaitingForWorkload")
        assert [(e.message, e.count) for e in after] == [(told[0].message, 1)]
