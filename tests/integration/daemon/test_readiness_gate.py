"""A Ready condition older than the daemon's own container does not make its entry Ready.

The pod is bound to a node no kubelet serves, so the test alone writes its status: it plays
the API state right after a fast reboot (the earlier container's ``Ready=True`` still there)
while the daemon's own IMEX check fails, then lets the check pass.
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
from compute_domains.daemon.probe import CheckResult
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
    imex_ready = asyncio.Event()
    checks = 0

    async def own_check() -> CheckResult:
        nonlocal checks
        checks += 1
        return CheckResult(imex_ready.is_set(), "READY" if imex_ready.is_set() else "starting")

    seen: list[Readiness] = []
    changed = asyncio.Event()

    def on_change(value: Readiness) -> None:
        seen.append(value)
        changed.set()

    follower = readiness.PodReadiness(
        admin,
        ident,
        on_change=on_change,
        retry=backoff.Backoff(initial=0.05, maximum=1.0),
        own_check=own_check,
        check_interval=0.1,
    )
    task = asyncio.create_task(follower.run())
    try:
        async with asyncio.timeout(30):
            while checks < 5:  # the check was retried, the entry stayed NotReady throughout
                await asyncio.sleep(0.05)
        assert seen == [Readiness.NOT_READY]
        imex_ready.set()
        async with asyncio.timeout(30):
            while seen[-1] is not Readiness.READY:
                changed.clear()
                await changed.wait()
        # From now on the kubelet's probe rules: NotReady and Ready again follow the pod.
        await _set_status(admin, ns, "False")
        async with asyncio.timeout(30):
            while seen[-1] is not Readiness.NOT_READY:
                changed.clear()
                await changed.wait()
        checks_before = checks
        await _set_status(admin, ns, "True")
        async with asyncio.timeout(30):
            while seen[-1] is not Readiness.READY:
                changed.clear()
                await changed.wait()
        assert checks == checks_before
        assert seen == [Readiness.NOT_READY, Readiness.READY, Readiness.NOT_READY, Readiness.READY]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
