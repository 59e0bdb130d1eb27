"""Guide §5.3 (跨域 2 节点 RDMA), paths A (DRANET) and B (hostNetwork), from the files in
``examples/guide/`` applied with ``kubectl apply -f`` as they are.

The guide names its §5.3 files but prints none of them: the files are rebuilt from the guide's
text and say so in their headers. Two simulated racks of one node each stand for the guide's
cross-domain workers k8s134-cd-w0/w1 (§2.2: placed in different NVSwitch domains), labelled
``topology=cross-domain`` as §2.4 does. As §15.5 has it, one ComputeDomain (§5.2's file) covers
both domains and its daemons do not link across them.

The state the guide states ("跨域节点无 MNNVL, 使用纯 RDMA"), asserted for each path: both pods
Running, one on each domain's node (two ClusterUUIDs), the CD Ready over both nodes in two
cliques, each pod holding the channel while its program's IMEX domain holds only its own node:
in no view it logs is more than one node READY, so the peer is not reachable over IMEX and NCCL
(with NCCL_MNNVL_ENABLE=0, set by the files) uses the network. Path A's pods hold DRANET's four
RDMA NICs, the network NCCL falls back to, and their programs say every peer goes over them;
path B's run in the host's network (podIP = hostIP).
"""

from __future__ import annotations

import functools

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.api import computedomain
from compute_domains.sim import state, topology
from tests.e2e import guide_steps, helpers

pytestmark = pytest.mark.timeout(600)
SHAPE = topology.Shape(racks=2, nodes_per_rack=1)
DRANET = True
CD = "nccl-computedomain-test"
PODS = ("nccl-cd-host-1", "nccl-cd-host-2")
WORKERS = (topology.node_name(0, 0), topology.node_name(1, 0))
ALL_OVER_RDMA = f"NCCL_MNNVL_ENABLE=0: no MNNVL; every peer falls back to {guide_steps.FOUR_NICS}"


async def _formed(admin: AsyncClient) -> None:
    """Both pods Running, one per domain; the CD Ready over both in two cliques; each pod's
    program holding the channel and seeing only its own node in its IMEX domain."""
    await guide_steps.running(admin, PODS)
    await helpers.within(120, lambda: guide_steps.cd_ready(admin, CD, 2), f"{CD} Ready on 2 nodes")
    placed = {pod: await guide_steps.node_of(admin, pod) for pod in PODS}
    assert sorted(placed.values()) == sorted(WORKERS), placed
    st = await helpers.cd_status(admin, CD)
    assert len({n["cliqueID"] for n in st["nodes"]}) == 2, st
    obj = await admin.get(computedomain.ComputeDomainResource, CD, namespace="default")
    uid = str(obj.metadata.uid)  # type: ignore[union-attr]
    for pod, node in placed.items():
        channel = await helpers.expected_channel(admin, uid, node)
        await guide_steps.reaches_peers(admin, pod, peers=0, channel=channel)
        views = await guide_steps.imex_views(admin, pod)
        assert all(ready <= 1 for _, ready, _ in views), views


async def _gone(admin: AsyncClient) -> None:
    for pod in PODS:
        await helpers.within(90, functools.partial(helpers.gone, admin, Pod, pod), f"{pod} gone")


async def test_guide_5_3_cross_domain_two_nodes_paths_a_and_b(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    guide_steps.label(rack_sim, dict.fromkeys(WORKERS, "cross-domain"))
    uuids = {await guide_steps.cluster_uuid(admin, node) for node in WORKERS}
    assert len(uuids) == 2, uuids
    guide_steps.apply(rack_sim, "k8s134-rdma-deviceclass.yaml")
    guide_steps.apply(rack_sim, "k8s134-nccl-computedomain-test.yaml")

    # Path A: DRANET.
    guide_steps.apply(rack_sim, "k8s134-nccl-cross-domain-dranet.yaml")
    await _formed(admin)
    guide_steps.assert_dranet_nics(rack_sim, PODS)
    for pod in PODS:
        env = helpers.kubectl(rack_sim, "exec", pod, "--", "printenv", "NCCL_MNNVL_ENABLE")
        assert env.strip() == "0", env
        # The program says what NCCL does here: no MNNVL, every peer over DRANET's RDMA NICs.
        await guide_steps.transport(admin, pod, ALL_OVER_RDMA.__eq__, "every peer over RDMA")
    guide_steps.delete(rack_sim, "k8s134-nccl-cross-domain-dranet.yaml")
    await _gone(admin)

    # Path B: hostNetwork.
    guide_steps.apply(rack_sim, "k8s134-nccl-cross-domain-hostnet.yaml")
    await _formed(admin)
    await guide_steps.assert_host_network(admin, PODS)
    guide_steps.delete(rack_sim, "k8s134-nccl-cross-domain-hostnet.yaml")
    await _gone(admin)
    guide_steps.delete(rack_sim, "k8s134-nccl-computedomain-test.yaml")
