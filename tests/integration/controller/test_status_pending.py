"""Ready counts the whole job (issue 29, point 2), against the real control plane.

The test plays the daemons and the claims' allocation as ``test_status`` does; the pending pod
is a real pod that the real scheduler cannot place (its node selector matches no node), so the
message the status must quote is the scheduler's own. A CD whose job has three placed, Ready
replicas and a fourth whose claim exists but is not allocated is NotReady (``PodsPending``,
naming the pod and quoting the scheduler); it is Ready once that pod is gone. A second CD
whose only pod waits, while the first CD holds the node, names the first CD and the node.
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import names
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController
from tests.integration.controller.test_status import CLIQUE, _ready, _reason, _wait_status
from tests.integration.helpers import wait_for


def _scheduler_message(pod: Any) -> str:
    for cond in pod.status.conditions or []:
        if cond.type == "PodScheduled" and cond.status == "False":
            return str(cond.message)
    return ""


async def test_a_pending_replica_keeps_the_cd_not_ready_and_names_the_pod(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    cd = await objects.create_cd(client, "cd-p", user_ns, "cd-p-channel")
    uid = cd.metadata.uid
    n1 = f"p1-{uid[:6]}"
    async with objects.nodes(client, n1):
        pod = await objects.workload_pod(client, user_ns, "w-0", node=n1)
        await objects.workload_claim(client, user_ns, "c-0", domain_uid=uid, node=n1, pod=pod)
        await objects.daemon_pod(
            client, driver_ns, domain_uid=uid, node=n1, ip="10.8.0.1", clique_id=CLIQUE, ready=True
        )
        await objects.register(
            client, driver_ns, domain_uid=uid, clique_id=CLIQUE, node=n1, ip="10.8.0.1", ready=True
        )
        await _wait_status(client, user_ns, "cd-p", lambda s, n: s["status"] == "Ready")

        # A second replica: its claim exists, the scheduler finds no node for its pod.
        await objects.workload_claim(client, user_ns, "c-1", domain_uid=uid, node="")
        await objects.pending_pod(client, user_ns, "w-1", claim="c-1")
        told = await wait_for(
            client, Pod, "w-1", lambda p: bool(_scheduler_message(p)), namespace=user_ns
        )
        message = _scheduler_message(told)
        cdo = await _wait_status(client, user_ns, "cd-p", lambda s, n: _reason(s) == "PodsPending")
        assert cdo["status"]["status"] == "NotReady"
        text = _ready(cdo["status"])["message"]
        assert f"pod {user_ns}/w-1 (claim c-1): {message}" in text, text
        assert "1 of 1 nodes Ready" in text, text

        # A second CD whose only pod waits while cd-p holds n1 names cd-p and the node.
        await client.patch(Node, n1, {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: uid}}})
        other = await objects.create_cd(client, "cd-q", user_ns, "cd-q-channel")
        await objects.workload_claim(client, user_ns, "q-0", domain_uid=other.metadata.uid, node="")
        await objects.pending_pod(client, user_ns, "q-0", claim="q-0")
        cdq = await _wait_status(client, user_ns, "cd-q", lambda s, n: _reason(s) == "PodsPending")
        text = _ready(cdq["status"])["message"]
        assert f"pod {user_ns}/q-0 (claim q-0)" in text, text
        assert f"ComputeDomain {user_ns}/cd-p holds {n1}" in text, text

        # The pending replica goes: Ready again.
        await client.delete(Pod, "w-1", namespace=user_ns, grace_period=0)
        await client.delete(ResourceClaim, "c-1", namespace=user_ns)
        await _wait_status(client, user_ns, "cd-p", lambda s, n: s["status"] == "Ready")
        await client.delete(Pod, "q-0", namespace=user_ns, grace_period=0)
