"""The platform job controller with the guide's RDMA (§15.5 path A) on DRANET's stand-in.

Two racks of one node each, the simulator's ``dra.net`` driver on (``DRANET``), the guide's
``rdma-devices`` DeviceClass applied from ``examples/guide/`` as the guide's §3.4 applies it.
``cdctl job launch`` with RDMA on (its default) creates the ComputeDomain over both racks, the
shared ``<job>-rdma`` template and one pod per rack; each pod's container sees the CD's channel
and the four RDMA NICs with their character devices (DRANET's part), the ComputeDomain turns
Ready over both nodes, and ``cdctl job delete`` removes it all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate

from compute_domains.api import computedomain
from compute_domains.jobs import kubeio, launcher
from compute_domains.jobs import spec as specs
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.test_job_controller import cdctl

pytest.importorskip(
    "compute_domains.sim.dranet",
    reason="needs the simulator's DRANET stand-in (issue 27 point 5, branch dranet)",
)
pytestmark = pytest.mark.timeout(900)
SHAPE = topology.Shape(racks=2, nodes_per_rack=1)
DRANET = True
REPO = Path(__file__).resolve().parents[2]
JOB = "rdma-job"
_PROBE = (
    "ls /dev/nvidia-caps-imex-channels; ls /sys/class/net; ls /dev/infiniband; "
    "echo probed; sleep 3600"
)


async def test_job_controller_gives_every_rank_its_channel_and_four_rdma_nics(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    uuids = {
        str(n.metadata.name): (n.metadata.labels or {})[specs.CLUSTER_UUID_LABEL]  # type: ignore[union-attr]
        async for n in admin.list(Node, labels={specs.CLUSTER_UUID_LABEL: None})
    }
    uuid_a, uuid_b = uuids["gb200-r0-n00"], uuids["gb200-r1-n00"]
    helpers.kubectl(
        rack_sim, "apply", "-f", str(REPO / "examples/guide/k8s134-rdma-deviceclass.yaml")
    )
    out = cdctl(
        rack_sim,
        "launch",
        JOB,
        "--domain",
        f"{uuid_a}:1",
        "--domain",
        f"{uuid_b}:1",
        "--",
        "sh",
        "-c",
        _PROBE,
    ).stdout
    assert f"created ResourceClaimTemplate default/{JOB}-rdma" in out, out
    rct = await admin.get(ResourceClaimTemplate, f"{JOB}-rdma", namespace="default")
    assert rct.spec.spec.devices.requests[0].exactly.deviceClassName == "rdma-devices"  # type: ignore[union-attr,index]

    api = kubeio.Api(admin)
    job = await launcher.load(api, JOB, "default")

    async def running() -> bool:
        states = await launcher.status(api, job)
        return all(s.live is not None and helpers.ready(s.live) for s in states)

    await helpers.within(240, running, "both ranks Ready")
    for rank, uuid in enumerate((uuid_a, uuid_b)):
        pod = await admin.get(Pod, f"{JOB}-{rank}", namespace="default")
        assert uuids[str(pod.spec.nodeName)] == uuid  # type: ignore[union-attr]
        channel = await helpers.pod_channel(admin, f"{JOB}-{rank}", f"{JOB}-cd")
        await helpers.log_with(
            admin,
            f"{JOB}-{rank}",
            (channel, "gpu0rdma0", "gpu3rdma0", "uverbs0", "uverbs3", "rdma_cm", "probed"),
        )
    claims = [c async for c in admin.list(ResourceClaim, namespace="default")]
    rdma = [
        c
        for c in claims
        if c.status and c.status.allocation
        for r in c.status.allocation.devices.results  # type: ignore[union-attr]
        if r.driver == "dra.net"
    ]
    assert len(rdma) == 8, [c.metadata.name for c in claims]  # type: ignore[union-attr]

    async def cd_ready() -> bool:
        st = await helpers.cd_status(admin, f"{JOB}-cd")
        return st.get("status") == "Ready" and len(st.get("nodes") or []) == 2

    await helpers.within(60, cd_ready, "ComputeDomain Ready over both racks")
    out = cdctl(rack_sim, "delete", JOB).stdout
    assert f"deleted ResourceClaimTemplate default/{JOB}-rdma" in out, out

    async def job_gone() -> bool:
        pods = [p async for p in admin.list(Pod, namespace="default", labels={"job": JOB})]
        return not pods and await helpers.gone(
            admin, computedomain.ComputeDomainResource, f"{JOB}-cd"
        )

    await helpers.within(180, job_gone, "the job's pods and ComputeDomain gone")
