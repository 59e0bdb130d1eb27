"""A Ready condition older than the daemon's own container does not make its entry Ready.

The pod is bound to a node no kubelet serves, so the test alone writes its status: it plays
the API state right after a fast reboot (the earlier container's ``Ready=True`` still there)
while the daemon's own IMEX check has not passed, then lets it pass, and takes Ready away by
the pod's condition and by the own check.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount

from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import readiness
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def ns(admin: AsyncClient) -> AsyncIterator[str]:
    name = f"gate-{uuid.uuid4().hex[:6]}"
    await admin.create(Namespace(metadata=ObjectMeta(name=name)))
    await wait_for(admin, ServiceAccount, "default", lambda _: True, namespace=name)
    yield name
    await admin.delete(Namespace, name)


async def _set_status(admin: AsyncClient, ns: str, ready: str) -> None:
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}
    await admin.patch(Pod.Status, "daemon", {"status": status}, namespace=ns)


async def test_a_stale_ready_condition_waits_for_the_daemons_own_check(
    admin: AsyncClient, ns: str
) -> None:
    pod = await admin.create(
        Pod.from_dict(
            {
                "metadata": {"name": "daemon", "namespace": ns},
                "spec": {
                    "nodeName": "no-kubelet-serves-this",
                    "containers": [{"name": "c", "image": "debian:12"}],
                },
            }
        )
    )
    assert pod.metadata is not None and pod.metadata.uid
    await _set_status(admin, ns, "True")  # the earlier container's condition
    ident = Identity(
        node_name="n",
        pod_name="daemon",
        pod_namespace=ns,
        pod_uid=pod.metadata.uid,
        clique_id="c.1",
    )
    seen: list[Readiness] = []
    changed = asyncio.Event()

    def on_change(value: Readiness) -> None:
        seen.append(value)
        changed.set()

    async def until(value: Readiness) -> None:
        async with asyncio.timeout(30):
            while seen[-1:] != [value]:
                changed.clear()
                await changed.wait()

    follower = readiness.PodReadiness(
        admin,
        ident,
        on_change=on_change,
        retry=backoff.Backoff(initial=0.05, maximum=1.0),
        own_check=True,
    )
    task = asyncio.create_task(follower.run())
    try:
        # The watch delivered the stale Ready=True; our own check has not passed: NotReady.
        await until(Readiness.NOT_READY)
        async with asyncio.timeout(30):
            while follower.pod_says is not Readiness.READY:
                await asyncio.sleep(0.05)  # re-test the condition (the gate hides it)
        assert seen == [Readiness.NOT_READY]
        follower.set_own(True)  # our own IMEX check passed
        await until(Readiness.READY)
        # The pod's condition and our own check each can take Ready away.
        await _set_status(admin, ns, "False")
        await until(Readiness.NOT_READY)
        await _set_status(admin, ns, "True")
        await until(Readiness.READY)
        follower.set_own(False)  # IMEX stopped answering READY: at once, not at the next probe
        await until(Readiness.NOT_READY)
        assert seen == [
            Readiness.NOT_READY,
            Readiness.READY,
            Readiness.NOT_READY,
            Readiness.READY,
            Readiness.NOT_READY,
        ]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
