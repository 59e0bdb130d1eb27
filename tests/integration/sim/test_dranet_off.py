"""A sim started without DRANET (``cdctl sim up --no-dranet``, the guide's path B) has no
``dra.net`` driver: no slices, no namespace, and a pod asking for the guide's RDMA NICs is not
scheduled (the scheduler finds no device for its claim)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from lightkube import AsyncClient, codecs
from lightkube.resources.core_v1 import Namespace, Pod
from lightkube.resources.resource_v1 import ResourceClaimTemplate, ResourceSlice

from compute_domains.sim import state
from tests.integration.sim import test_dranet


async def test_without_dranet_nothing_offers_rdma_nics(
    nodes_sim: state.SimPaths, admin: AsyncClient, ns: str
) -> None:
    assert [s async for s in admin.list(ResourceSlice, fields={"spec.driver": "dra.net"})] == []
    assert "dranet-system" not in {
        n.metadata.name async for n in admin.list(Namespace) if n.metadata
    }
    dc = codecs.from_dict(yaml.safe_load(Path(test_dranet.DEVICE_CLASS).read_text()))
    await admin.apply(dc, field_manager="tests", force=True)
    template = yaml.safe_load(test_dranet.RDMA_TEMPLATE)
    await admin.create(ResourceClaimTemplate.from_dict(template), namespace=ns)
    await admin.create(test_dranet._pod("rank-0", ns))
    # The first verdict may come while the fresh nodes still carry their not-ready taint; the
    # scheduler retries as they turn Ready, and then names the claim it cannot allocate.
    message = ""
    async with asyncio.timeout(60):
        async for _op, pod in admin.watch(Pod, namespace=ns, fields={"metadata.name": "rank-0"}):
            assert pod.spec is not None and not pod.spec.nodeName, "scheduled without DRANET"
            conds = {c.type: c for c in (pod.status.conditions or [])} if pod.status else {}
            sched = conds.get("PodScheduled")
            if sched is not None and sched.status == "False":
                assert sched.reason == "Unschedulable"
                message = sched.message or ""
                if "cannot allocate all claims" in message:
                    break
