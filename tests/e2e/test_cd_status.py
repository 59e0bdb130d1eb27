"""Upstream G3 "global CD status" and D1 "daemon shutdown: status cleanup", with their limits.

One node, a ComputeDomain with ``numNodes: 1`` and one workload pod (upstream's
``channel-injection.yaml``): the pod is Ready within 100 s; the CD is ``Ready`` with its node
within 4 s of that; deleting the pod takes under 10 s; then within 3 s the node entry is gone and
the CD is ``NotReady`` (G3 allows 5 s), and the node's daemon goes away with its claim.
"""

from __future__ import annotations

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.api import computedomain
from compute_domains.sim import topology
from tests.e2e import helpers
from tests.e2e.test_seed_example import _follow_log

pytestmark = pytest.mark.timeout(900)
SHAPE = topology.Shape(racks=1, nodes_per_rack=1)
CD = "imex-channel-injection"


async def test_g3_d1_status_follows_the_workload(admin: AsyncClient) -> None:
    await admin.create(
        computedomain.ComputeDomainResource(
            metadata=ObjectMeta(name=CD, namespace="default"),
            spec={"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": f"{CD}-rct"}}},
        )
    )
    await admin.create(
        helpers.channel_pod(
            "imex-channel-injection",
            f"{CD}-rct",
            command="ls /dev/nvidia-caps-imex-channels; sleep 3600",
        )
    )

    async def pod_ready() -> bool:
        return helpers.ready(await admin.get(Pod, "imex-channel-injection", namespace="default"))

    await helpers.within(100, pod_ready, "workload pod Ready")
    logs = await _follow_log(admin, "imex-channel-injection", "channel0", timeout=30)
    assert "channel0" in logs

    async def cd_ready() -> bool:
        st = await helpers.cd_status(admin, CD)
        return st.get("status") == "Ready" and len(st.get("nodes") or []) == 1

    await helpers.within(
        4, cd_ready, "G3: CD Ready with its node after the pod turned Ready", interval=0.1
    )
    uid = (
        await admin.get(computedomain.ComputeDomainResource, CD, namespace="default")
    ).metadata.uid  # type: ignore[union-attr]
    daemons = await helpers.daemon_pods(admin, uid)
    assert len(daemons) == 1

    await admin.delete(Pod, "imex-channel-injection", namespace="default")

    async def pod_gone() -> bool:
        try:
            await admin.get(Pod, "imex-channel-injection", namespace="default")
        except ApiError as err:
            return err.status.code == 404
        return False

    await helpers.within(10, pod_gone, "workload pod gone")

    async def cd_empty() -> bool:
        st = await helpers.cd_status(admin, CD)
        return not st.get("nodes") and st.get("status") == "NotReady"

    await helpers.within(3, cd_empty, "D1/G3: node entry removed and CD NotReady", interval=0.1)

    async def daemon_gone() -> bool:
        left = await helpers.daemon_pods(admin, uid)
        return not left

    await helpers.within(60, daemon_gone, "the node's daemon leaves with the last claim")
    await admin.delete(computedomain.ComputeDomainResource, CD, namespace="default")
