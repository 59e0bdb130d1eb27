"""Guide §15.4's ComputeDomain + training pod + placeholder and §15.6's PriorityClass: the
manifests the guide prints, copied unchanged into ``examples/guide/`` and applied as they are,
with only the ClusterUUID the guide elides (``"804c7837-..."``) filled in with the simulated
rack's.

What the guide's text gets, asserted:

- unfilled, the file is refused (``"804c7837-..."`` is no valid label value): the fill-in is
  required, as the guide's ``...`` says;
- filled, ``kubectl apply`` creates the ComputeDomain and spare-placeholder-0 (which runs on a
  node of that ClusterUUID, holding its GPUs and no claim, as §15.4 says) but the API server
  rejects training-worker-0: its priorityClassName ``training-high-priority`` is defined nowhere
  in the guide (§15.6 prints only ``spare-low-priority``, §9.1 names gpu-training and
  gpu-placeholder). The pod's other missing piece, the template ``rdma-nics-worker-0`` (never
  printed), is not reached. So the guide's §15.4 state (training pods with channels, daemons on
  every node) cannot be reached from its printed manifests; the ComputeDomain, with no workload
  claim, stays NotReady (``NoWorkload``), NVIDIA's and our behaviour without pods.
- on the simulator the training pod would not run even if admitted: its image
  nvcr.io/nvidia/pytorch:25.04-py3 has no command here (no registry; docs/simulator.md).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.api import computedomain
from compute_domains.sim import state, topology
from tests.e2e import guide_steps, helpers

pytestmark = pytest.mark.timeout(600)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
FILE = "k8s134-15.4-computedomain-64plus8.yaml"
ELIDED = 'nvidia.com/gpu.clusteruuid: "804c7837-..."'


async def test_guide_15_4_printed_manifests_as_written(
    admin: AsyncClient, rack_sim: state.SimPaths, tmp_path: Path
) -> None:
    guide_steps.apply(rack_sim, "k8s134-15.6-spare-low-priority.yaml")
    text = (guide_steps.GUIDE / FILE).read_text()
    assert text.count(ELIDED) == 2, text
    with pytest.raises(AssertionError) as unfilled:
        helpers.kubectl(rack_sim, "apply", "--dry-run=server", "-f", str(guide_steps.GUIDE / FILE))
    assert "804c7837-..." in str(unfilled.value) and "Invalid value" in str(unfilled.value)

    uuid = await guide_steps.cluster_uuid(admin, topology.node_name(0, 0))
    filled = tmp_path / FILE
    filled.write_text(text.replace(ELIDED, f'nvidia.com/gpu.clusteruuid: "{uuid}"'))
    with pytest.raises(AssertionError) as applied:
        helpers.kubectl(rack_sim, "apply", "-f", str(filled))
    said = str(applied.value)
    assert "no PriorityClass with name training-high-priority was found" in said, said
    assert await helpers.gone(admin, Pod, "training-worker-0")

    await guide_steps.running(admin, ("spare-placeholder-0",), seconds=120)
    node = await guide_steps.node_of(admin, "spare-placeholder-0")
    assert await guide_steps.cluster_uuid(admin, node) == uuid
    placeholder = await admin.get(Pod, "spare-placeholder-0", namespace="default")
    assert placeholder.spec is not None and not placeholder.spec.resourceClaims

    async def no_workload() -> bool:
        st = await helpers.cd_status(admin, "training-domain")
        cond = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
        return st.get("status") == "NotReady" and cond.get("reason") == "NoWorkload"

    await helpers.within(60, no_workload, "training-domain NotReady (NoWorkload)")
    assert await helpers.daemon_pods(admin, None) == []

    helpers.kubectl(rack_sim, "delete", "-f", str(filled), "--ignore-not-found", "--wait=false")
    await helpers.within(
        90,
        functools.partial(
            helpers.gone, admin, computedomain.ComputeDomainResource, "training-domain"
        ),
        "training-domain gone",
    )
