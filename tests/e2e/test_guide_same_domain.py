"""Guide §5.2 (同域 2 节点 MNNVL), paths A (DRANET) and B (hostNetwork), from the files in
``examples/guide/`` applied with ``kubectl apply -f`` as they are.

The guide names its §5.2 files but prints none of them: the files under ``examples/guide/`` are
rebuilt from the guide's text (each file's header says from what) and are not the guide's own
manifests. The guide's setup steps are run as written where the simulator has them: §2.4's
``topology=same-domain`` node labels (on the sim's two nodes of one rack, for the guide's
k8s134-sd-w0/w1), §3.4's DeviceClass (path A).

The state the guide states, asserted for each path: the ComputeDomain READY over both nodes (one
clique: one ClusterUUID), both pods Running on the two labelled nodes, each holding the CD's
channel (``channel0``), and each pod's program seeing both nodes READY in its IMEX domain (its
peer reachable over IMEX, what NCCL_MNNVL_ENABLE=2 needs; a 2-node domain of the 18 names in
``nodes.cfg`` reports DEGRADED 2/18, as the real service does). Path A's pods also hold
DRANET's four RDMA NICs; path B's run in the host's network (podIP = hostIP, the address the
guide's mpirun uses).

Where the guide cannot be followed literally (asserted, so a change shows):

- §5.2 checks ``kubectl get computedomain`` for READY right after applying the ComputeDomain,
  before any pod. NVIDIA's driver (and ours) starts IMEX daemons only on nodes where a pod's
  channel claim is prepared, so a CD without pods is not Ready; it is READY once the pods run
  (the guide's second check).
- §5.2/§10 list daemon pods with ``-l app.kubernetes.io/managed-by=compute-domain-controller``
  in the default namespace. NVIDIA v25.12.0's daemon pods carry only
  ``resource.nvidia.com/computeDomain`` (templates/compute-domain-daemon.tmpl.yaml) and live in
  the driver's namespace; ours are the same, so the guide's command lists nothing. The daemons
  are found by NVIDIA's label.
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
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
DRANET = True
CD = "nccl-computedomain-test"
PODS = ("nccl-sd-host-1", "nccl-sd-host-2")
WORKERS = tuple(topology.node_name(0, i) for i in range(2))


async def _formed(admin: AsyncClient) -> dict[str, str]:
    """Both pods Running on the two same-domain workers, the CD Ready over both, each pod's
    program reaching its peer over IMEX; returns pod → node."""
    await guide_steps.running(admin, PODS)
    await helpers.within(120, lambda: guide_steps.cd_ready(admin, CD, 2), f"{CD} Ready on 2 nodes")
    placed = {pod: await guide_steps.node_of(admin, pod) for pod in PODS}
    assert sorted(placed.values()) == sorted(WORKERS), placed
    st = await helpers.cd_status(admin, CD)
    assert len({n["cliqueID"] for n in st["nodes"]}) == 1, st
    assert {n["name"] for n in st["nodes"]} == set(WORKERS), st
    obj = await admin.get(computedomain.ComputeDomainResource, CD, namespace="default")
    uid = str(obj.metadata.uid)  # type: ignore[union-attr]
    for pod, node in placed.items():
        channel = await helpers.expected_channel(admin, uid, node)
        await guide_steps.reaches_peers(admin, pod, peers=1, channel=channel)
    return placed


async def _gone(admin: AsyncClient) -> None:
    for pod in PODS:
        await helpers.within(90, functools.partial(helpers.gone, admin, Pod, pod), f"{pod} gone")


async def test_guide_5_2_same_domain_two_nodes_paths_a_and_b(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    guide_steps.label(rack_sim, dict.fromkeys(WORKERS, "same-domain"))
    assert await guide_steps.cluster_uuid(admin, WORKERS[0]) == await guide_steps.cluster_uuid(
        admin, WORKERS[1]
    )
    guide_steps.apply(rack_sim, "k8s134-rdma-deviceclass.yaml")
    guide_steps.apply(rack_sim, "k8s134-nccl-computedomain-test.yaml")
    # The guide's first READY check: not reachable before any pod claims the channel.
    assert not await guide_steps.cd_ready(admin, CD, 2)
    listed = helpers.kubectl(
        rack_sim,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/managed-by=compute-domain-controller",
        "-o",
        "wide",
    )
    assert listed.strip() == "", listed

    # Path A: DRANET.
    guide_steps.apply(rack_sim, "k8s134-nccl-same-domain-dranet.yaml")
    await _formed(admin)
    guide_steps.assert_dranet_nics(rack_sim, PODS)
    shown = helpers.kubectl(rack_sim, "get", "computedomain", "-o", "wide")
    assert CD in shown and "Ready" in shown, shown
    guide_steps.delete(rack_sim, "k8s134-nccl-same-domain-dranet.yaml")
    await _gone(admin)

    # Path B: hostNetwork.
    guide_steps.apply(rack_sim, "k8s134-nccl-same-domain-hostnet.yaml")
    await _formed(admin)
    await guide_steps.assert_host_network(admin, PODS)
    guide_steps.delete(rack_sim, "k8s134-nccl-same-domain-hostnet.yaml")
    await _gone(admin)
    guide_steps.delete(rack_sim, "k8s134-nccl-computedomain-test.yaml")
