"""A bench teardown that does not end says what was left (``observe.delete_and_wait``).

Against the real API server: a pod of the run's workload that nothing deletes (bound to a node
no kubelet runs) keeps the teardown from ending; the timeout's error names it, so a leak seen
at scale is found from the bench's own output instead of a bare "not reached".
"""

from __future__ import annotations

import uuid

import pytest
from lightkube import AsyncClient
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.bench import observe

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
