"""A bench teardown that does not end says what was left (``observe.delete_and_wait``).

Against the real API server: a pod of the run's workload that nothing deletes (bound to a node
no kubelet runs) keeps the teardown from ending; the timeout's error names it, so a leak seen
at scale is found from the bench's own output instead of a bare "not reached".
"""

from __future__ import annotations

import asyncio
import uuid

import httpx2 as httpx
import pytest
from lightkube import AsyncClient
from lightkube.config import client_adapter
from lightkube.config.kubeconfig import KubeConfig
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.bench import observe
from compute_domains.sim import state

NAMESPACE = "default"


async def test_a_teardown_that_does_not_end_names_what_is_left(client: AsyncClient) -> None:
    name = f"leak-{uuid.uuid4().hex[:6]}"
    pod = f"{name}-stays"
    spec = PodSpec(nodeName=f"ghost-{name}", containers=[Container(name="c", image="pause")])
    meta = ObjectMeta(name=pod, namespace=NAMESPACE, labels={"bench": name})
    await client.create(Pod(metadata=meta, spec=spec))
    try:
        with pytest.raises(TimeoutError, match=f"still there: workload pod {pod}$"):
            await observe.delete_and_wait(
                client, uid=None, ns=NAMESPACE, name=name, driver_ns="unused", timeout=0.5
            )
    finally:
        await client.delete(Pod, pod, namespace=NAMESPACE, grace_period=0)
    assert (
        await observe.delete_and_wait(
            client, uid=None, ns=NAMESPACE, name=name, driver_ns="unused", timeout=30
        )
        >= 0
    )


class _Unanswered(httpx.AsyncBaseTransport):
    """The real API server's transport, except that the first ``drops`` reads of pods get no
    answer: what the API server did to a teardown's list at 4,608 nodes under load 50."""

    def __init__(self, inner: httpx.AsyncBaseTransport, drops: int) -> None:
        self.inner, self.drops = inner, drops

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path.endswith("/pods") and self.drops:
            self.drops -= 1
            raise httpx.RemoteProtocolError(
                "Server disconnected without sending a response.", request=request
            )
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_teardown_outlasts_checks_the_api_server_did_not_answer(
    client: AsyncClient, sim: state.SimPaths
) -> None:
    # Without it the first unanswered check ended the whole bench run, and the formation's
    # figures, measured minutes before, were never written.
    name = f"drop-{uuid.uuid4().hex[:6]}"
    pod = f"{name}-goes"
    spec = PodSpec(nodeName=f"ghost-{name}", containers=[Container(name="c", image="pause")])
    meta = ObjectMeta(name=pod, namespace=NAMESPACE, labels={"bench": name})
    await client.create(Pod(metadata=meta, spec=spec))
    config = KubeConfig.from_file(sim.kubeconfig)
    one = config.get()
    assert one is not None and one.user is not None
    tls = client_adapter.verify_cluster(one.cluster, one.user, one.abs_file, False)
    flaky = _Unanswered(httpx.AsyncHTTPTransport(verify=tls), drops=3)
    through = AsyncClient(config, field_manager="tests", transport=flaky, trust_env=False)
    try:
        teardown = asyncio.create_task(
            observe.delete_and_wait(
                through, uid=None, ns=NAMESPACE, name=name, driver_ns="unused", timeout=60
            )
        )
        await client.delete(Pod, pod, namespace=NAMESPACE, grace_period=0)
        assert await teardown >= 0
    finally:
        await through.close()
    assert flaky.drops == 0  # the checks were refused, and the teardown still ended
