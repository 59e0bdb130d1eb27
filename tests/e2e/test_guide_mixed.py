"""Guide §5.4 (混合 4 节点), paths A (DRANET) and B (hostNetwork), from the files in
``examples/guide/`` applied with ``kubectl apply -f`` as they are.

The guide names its §5.4 files but prints none of them: the files are rebuilt from the guide's
text and say so in their headers (their ComputeDomain is our choice: §5.4 applies none). Three
simulated racks stand for the guide's three NVLink domains: the same-domain workers
k8s134-sd-w0/w1 (two nodes of rack 0) and the cross-domain workers k8s134-cd-w0/w1 (one node of
racks 1 and 2; §2.2 places them in other NVSwitch domains), labelled as §2.4 does. The sixth
node is unlabelled and must stay empty.

The state, asserted for each path: four pods Running, one on each labelled worker; the CD Ready
over the four nodes in three cliques; every pod holds the channel; the two same-domain pods'
programs each see both of their nodes READY in their IMEX domain (MNNVL between them, what
NCCL_MNNVL_ENABLE=2 picks), and each cross-domain pod's program sees only its own node in every
view it logs (no IMEX link to any other domain: NCCL uses the network to reach it). In the
per-clique scope every view is its own rack's: the clique's shared IMEX spans both of its nodes.
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
SHAPE = topology.Shape(racks=3, nodes_per_rack=2)
DRANET = True
CD = "nccl-4node-mixed"
PODS = tuple(f"nccl-mix-host-{i}" for i in range(1, 5))
SAME = (topology.node_name(0, 0), topology.node_name(0, 1))
CROSS = (topology.node_name(1, 0), topology.node_name(2, 0))


async def _formed(admin: AsyncClient) -> None:
    await guide_steps.running(admin, PODS)
    await helpers.within(120, lambda: guide_steps.cd_ready(admin, CD, 4), f"{CD} Ready on 4 nodes")
    placed = {pod: await guide_steps.node_of(admin, pod) for pod in PODS}
    assert sorted(placed.values()) == sorted(SAME + CROSS), placed
    st = await helpers.cd_status(admin, CD)
    assert len({n["cliqueID"] for n in st["nodes"]}) == 3, st
    obj = await admin.get(computedomain.ComputeDomainResource, CD, namespace="default")
    uid = str(obj.metadata.uid)  # type: ignore[union-attr]
    for pod, node in placed.items():
        channel = await helpers.expected_channel(admin, uid, node)
        # Per clique the shared IMEX spans the whole rack (two nodes), CD or not.
        own = 2 if node in SAME else 1
        peers = helpers.imex_domain_nodes(own, clique_nodes=SHAPE.nodes_per_rack) - 1
        await guide_steps.reaches_peers(admin, pod, peers=peers, channel=channel)
        views = await guide_steps.imex_views(admin, pod)
        assert all(ready <= peers + 1 for _, ready, _ in views), (pod, node, views)


async def _gone(admin: AsyncClient) -> None:
    for pod in PODS:
        await helpers.within(90, functools.partial(helpers.gone, admin, Pod, pod), f"{pod} gone")
    await helpers.within(
        90,
        functools.partial(helpers.gone, admin, computedomain.ComputeDomainResource, CD),
        f"{CD} gone",
    )


async def test_guide_5_4_mixed_four_nodes_paths_a_and_b(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    guide_steps.label(rack_sim, dict.fromkeys(SAME, "same-domain"))
    guide_steps.label(rack_sim, dict.fromkeys(CROSS, "cross-domain"))
    uuids = [await guide_steps.cluster_uuid(admin, node) for node in SAME + CROSS]
    assert uuids[0] == uuids[1] and len(set(uuids)) == 3, uuids
    guide_steps.apply(rack_sim, "k8s134-rdma-deviceclass.yaml")

    # Path A: DRANET.
    guide_steps.apply(rack_sim, "k8s134-nccl-4node-mixed-dranet.yaml")
    await _formed(admin)
    guide_steps.assert_dranet_nics(rack_sim, PODS)
    guide_steps.delete(rack_sim, "k8s134-nccl-4node-mixed-dranet.yaml")
    await _gone(admin)

    # Path B: hostNetwork.
    guide_steps.apply(rack_sim, "k8s134-nccl-4node-mixed-hostnet.yaml")
    await _formed(admin)
    await guide_steps.assert_host_network(admin, PODS)
    guide_steps.delete(rack_sim, "k8s134-nccl-4node-mixed-hostnet.yaml")
    await _gone(admin)
