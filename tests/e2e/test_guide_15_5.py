"""Guide §15.5 (2 domains + DRANET): one ComputeDomain over two NVLink domains of
18 nodes, the shared RDMA template, 36 pods pinned by ``nvidia.com/gpu.clusteruuid`` with ranks
in domain order, from ``examples/guide/k8s134-nccl-2domain-computedomain-dranet.yaml`` applied
with ``kubectl apply -f`` (after §3.4's DeviceClass), the guide's two ClusterUUID placeholders
filled in with the simulated racks'. Two racks of 18 virtual nodes, DRANET's stand-in on.

The state the section states, asserted:

- every pod Running, one per node, ranks 0-17 on Domain A's nodes and 18-35 on Domain B's
  ("Domain A 的 Pod (rank 0~17)", "Domain B 的 Pod (rank 18~35)");
- the ComputeDomain Ready over the 36 nodes in two cliques of 18 ("控制器自动为每个物理域创建独立的
  ComputeDomainClique");
- each pod's own claim from the shared template holds 4 ``dra.net`` RDMA NICs of its node
  ("每个 Pod 实例化时 ... DRANET 为每个 Pod 分配 4 个 RDMA NIC");
- each pod's program holds the channel and sees its domain's 18 nodes READY over IMEX, never
  more ("跨域 daemon pods 不互联"), and says the ranks outside it fall back to RDMA over the 4 NICs
  ("域内用 MNNVL, 跨域降级到 RDMA", punctuation ASCII).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import computedomain
from compute_domains.sim import state, topology
from tests.e2e import guide_steps, helpers

pytestmark = pytest.mark.timeout(1500)
SHAPE = topology.Shape(racks=2, nodes_per_rack=18)
NODES_MODE = "virtual"
DRANET = True
FILE = "k8s134-nccl-2domain-computedomain-dranet.yaml"
DOMAIN_A = "804c7837-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
DOMAIN_B = "89164aa7-yyyy-yyyy-yyyy-yyyyyyyyyyyy"
CD = "training-job-cd"
PODS = tuple(f"train-{rank}" for rank in range(36))
FALLBACK = (
    "MNNVL to the 18 READY nodes of this IMEX domain; at least 18 of 36 ranks are outside it: "
    f"fall back to {guide_steps.FOUR_NICS}"
)


async def _rdma_devices(admin: AsyncClient, pod: str) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of every device allocated to the pod's ``rdma-nics`` claim."""
    obj = await admin.get(Pod, pod, namespace="default")
    statuses = (obj.status.resourceClaimStatuses if obj.status else None) or []
    names = {s.name: s.resourceClaimName for s in statuses}
    assert names.get("rdma-nics"), f"{pod} has no rdma-nics claim: {names}"
    claim_name = names["rdma-nics"]
    claim = await admin.get(ResourceClaim, str(claim_name), namespace="default")
    allocation = claim.status.allocation if claim.status else None
    assert allocation is not None and allocation.devices is not None, claim.status
    return [(r.driver, r.pool, r.device) for r in allocation.devices.results or []]


async def test_guide_15_5_one_cd_over_two_domains_of_18_with_shared_rdma(
    admin: AsyncClient, rack_sim: state.SimPaths, tmp_path: Path
) -> None:
    uuid_a = await guide_steps.cluster_uuid(admin, topology.node_name(0, 0))
    uuid_b = await guide_steps.cluster_uuid(admin, topology.node_name(1, 0))
    assert uuid_a != uuid_b
    text = (guide_steps.GUIDE / FILE).read_text()
    # The guide's placeholders, once per pod: the only fill-in.
    assert text.count(f'values: ["{DOMAIN_A}"]') == text.count(f'values: ["{DOMAIN_B}"]') == 18
    filled = tmp_path / FILE
    filled.write_text(text.replace(DOMAIN_A, uuid_a).replace(DOMAIN_B, uuid_b))
    guide_steps.apply(rack_sim, "k8s134-rdma-deviceclass.yaml")
    helpers.kubectl(rack_sim, "apply", "-f", str(filled))

    await guide_steps.running(admin, PODS, seconds=900)
    await helpers.within(
        300, lambda: guide_steps.cd_ready(admin, CD, 36), f"{CD} Ready on 36 nodes"
    )
    placed = {pod: await guide_steps.node_of(admin, pod) for pod in PODS}
    assert len(set(placed.values())) == 36, placed
    for rank, pod in enumerate(PODS):
        want = uuid_a if rank < 18 else uuid_b
        assert await guide_steps.cluster_uuid(admin, placed[pod]) == want, (pod, placed[pod])
    st = await helpers.cd_status(admin, CD)
    cliques: dict[str, int] = {}
    for entry in st["nodes"]:
        cliques[entry["cliqueID"]] = cliques.get(entry["cliqueID"], 0) + 1
    assert sorted(cliques.values()) == [18, 18], cliques

    obj = await admin.get(computedomain.ComputeDomainResource, CD, namespace="default")
    uid = str(obj.metadata.uid)  # type: ignore[union-attr]
    for rank, pod in enumerate(PODS):
        devices = await _rdma_devices(admin, pod)
        assert len(devices) == 4 and {(d, p) for d, p, _ in devices} == {
            ("dra.net", placed[pod])
        }, devices
        channel = await helpers.expected_channel(admin, uid, placed[pod])
        await guide_steps.reaches_peers(admin, pod, peers=17, channel=channel)
        # The program logs its rank once its wait for the domain ends (UP, or its 120-s --wait), so
        # the line may follow the view reaches_peers saw.
        await helpers.log_with(admin, pod, (f"rank: {rank} (from RANK)",), timeout=180)
        views = await guide_steps.imex_views(admin, pod)
        assert all(ready <= 18 for _, ready, _ in views), views
        await guide_steps.transport(
            admin, pod, lambda said: said == FALLBACK, "ranks outside the domain over RDMA"
        )

    helpers.kubectl(rack_sim, "delete", "-f", str(filled), "--wait=false")
    for pod in PODS:
        await helpers.within(120, functools.partial(helpers.gone, admin, Pod, pod), f"{pod} gone")
    await helpers.within(
        120,
        functools.partial(helpers.gone, admin, computedomain.ComputeDomainResource, CD),
        f"{CD} gone",
    )
