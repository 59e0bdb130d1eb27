"""The guide's platform job controller (§15.5, §15.6 rule 3) on two simulated racks (issue 27.7).

Two racks of three virtual nodes; the job gets two nodes of each (``cdctl job launch --domain
<rack 0 UUID>:2 --domain <rack 1 UUID>:2``), so each rack keeps a spare. Asserted:

1. bad input creates nothing: a domain asked for more nodes than it has, and RDMA without the
   ``rdma-devices`` DeviceClass (the simulator has no DRANET yet), each fail with one line that
   names the problem;
2. the job forms: one ComputeDomain over both racks, Ready with 4 nodes in two cliques; pods
   ``e2e-job-0..3`` all Running, ranks 0-1 on rack 0's nodes and 2-3 on rack 1's, one per node;
   each pod's program sees the CD's channel, its rank and an IMEX domain of its own rack's two
   nodes; launching again keeps all of it, and another job under the same name is refused;
3. a deleted rank (rank 1's pod deleted) is replaced by ``cdctl job replace-rank``: the new pod
   runs on rack 0 with its channel; a live rank is not replaced without ``--force``;
4. a failed rank (rank 2's node stopped, the pod's node NotReady) is found lost and replaced by
   ``launcher.replace_lost``: the new pod runs on rack 1's spare with its channel;
5. with ``jobs.keeper.Keeper`` running, rank 3's pod deleted is replaced at once (and only
   once) in rack 1;
6. ``cdctl job delete`` removes the pods and the ComputeDomain.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.api import computedomain
from compute_domains.jobs import keeper, kubeio, launcher, plan
from compute_domains.jobs import spec as specs
from compute_domains.sim import control, state, topology
from tests.e2e import helpers

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=2, nodes_per_rack=3)
NODES_MODE = "virtual"
JOB = "e2e-job"


def cdctl(sim: state.SimPaths, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``cdctl job ...`` against the sim as a user would (its own process)."""
    res = subprocess.run(
        [sys.executable, "-m", "compute_domains", "job", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "KUBECONFIG": str(sim.kubeconfig)},
    )
    if check and res.returncode != 0:
        raise AssertionError(f"cdctl job {' '.join(args)} failed:\n{res.stdout}{res.stderr}")
    return res


async def _racks(admin: AsyncClient) -> dict[str, str]:
    """Node name → its ``nvidia.com/gpu.clusteruuid``."""
    return {
        str(n.metadata.name): (n.metadata.labels or {})[specs.CLUSTER_UUID_LABEL]  # type: ignore[union-attr]
        async for n in admin.list(Node, labels={specs.CLUSTER_UUID_LABEL: None})
    }


def _running(pod: Pod | None) -> bool:
    return bool(pod and pod.status and pod.status.phase == "Running" and helpers.ready(pod))


async def _shows_channel(admin: AsyncClient, pod: str, rank: int, peers: str) -> str:
    """The workload's log once it reported its CD's channel, its rank (from the pod's ``RANK``)
    and ``peers`` in its IMEX domain (a domain of 2 of the 18 configured nodes reports DEGRADED,
    as the real service does, so the program says NOT READY after its short ``--wait``)."""
    channel = await helpers.pod_channel(admin, pod, f"{JOB}-cd")
    texts = ("IMEX channels: 1", channel, f"rank: {rank} (from RANK)", peers)
    return await helpers.log_with(admin, pod, texts, timeout=180)


async def test_job_controller_launches_two_domains_and_replaces_ranks_in_their_domain(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    node_uuid = await _racks(admin)
    uuid_a = node_uuid["gb200-r0-n00"]
    uuid_b = node_uuid["gb200-r1-n00"]
    api = kubeio.Api(admin)
    took: dict[str, float] = {}

    # 1. Bad input creates nothing.
    res = cdctl(rack_sim, "launch", JOB, "--domain", f"{uuid_a}:4", "--no-rdma", check=False)
    assert res.returncode == 1, res
    assert f"domain {uuid_a} has 3 nodes labelled" in res.stderr and "asks 4" in res.stderr, res
    res = cdctl(rack_sim, "launch", JOB, "--domain", f"{uuid_a}:2", check=False)
    assert res.returncode == 1, res
    assert "DeviceClass rdma-devices not found" in res.stderr and "--no-rdma" in res.stderr, res
    assert await helpers.gone(admin, computedomain.ComputeDomainResource, f"{JOB}-cd")

    # 2. The job forms over both racks, ranks in domain order.
    launch_argv = (
        rack_sim,
        "launch",
        JOB,
        "--domain",
        f"{uuid_a}:2",
        "--domain",
        f"{uuid_b}:2",
        "--no-rdma",
        "--",
        "mnnvl-workload",
        "--wait",
        "5",
        "--watch",
        "2",
    )
    out = cdctl(*launch_argv).stdout
    assert f"created ComputeDomain default/{JOB}-cd" in out, out
    assert all(f"created Pod default/{JOB}-{r}" in out for r in range(4)), out
    job = await launcher.load(api, JOB, "default")

    async def formed() -> bool:
        st = await helpers.cd_status(admin, f"{JOB}-cd")
        states = await launcher.status(api, job)
        return (
            st.get("status") == "Ready"
            and len(st.get("nodes") or []) == 4
            and all(_running(s.live) for s in states)
        )

    took["formed"] = await helpers.within(300, formed, "CD Ready with 4 nodes and 4 ranks Running")
    states = await launcher.status(api, job)
    nodes = [str(s.live.spec.nodeName) for s in states]  # type: ignore[union-attr]
    assert [node_uuid[n] for n in nodes] == [uuid_a, uuid_a, uuid_b, uuid_b], nodes
    assert len(set(nodes)) == 4, nodes
    assert [s.live.metadata.name for s in states] == [f"{JOB}-{r}" for r in range(4)]  # type: ignore[union-attr]
    cliques: dict[str, int] = {}
    for entry in (await helpers.cd_status(admin, f"{JOB}-cd"))["nodes"]:
        cliques[entry["cliqueID"]] = cliques.get(entry["cliqueID"], 0) + 1
    assert sorted(cliques.values()) == [2, 2], cliques
    # Two ranks per rack of three: the CD's two nodes per domain, the whole rack per clique.
    ready = helpers.imex_domain_nodes(cd_nodes=2, clique_nodes=SHAPE.nodes_per_rack)
    for rank in range(4):
        await _shows_channel(admin, f"{JOB}-{rank}", rank, f"{ready}/18 configured nodes READY")

    # A second launch keeps everything; another job under the same name is refused.
    again = cdctl(*launch_argv).stdout
    assert "created" not in again and again.count("kept") == 5, again
    res = cdctl(rack_sim, "launch", JOB, "--domain", f"{uuid_a}:1", "--no-rdma", check=False)
    assert res.returncode == 1 and "exists with another job's record" in res.stderr, res

    # 3. A deleted rank is replaced in its domain; a live one only with --force.
    res = cdctl(rack_sim, "replace-rank", JOB, "0", check=False)
    assert res.returncode == 1 and f"rank 0 of job {JOB} is served by pod {JOB}-0" in res.stderr
    await admin.delete(Pod, f"{JOB}-1", namespace="default")
    out = cdctl(rack_sim, "replace-rank", JOB, "1").stdout
    assert f"rank 1: created pod {JOB}-1-r1 in domain {uuid_a}" in out, out

    async def replaced(rank: int, name: str) -> Pod | None:
        pod = (await launcher.status(api, job))[rank].live
        return pod if _running(pod) and pod.metadata.name == name else None  # type: ignore[union-attr]

    took["rank 1 replaced"] = await helpers.within(
        180, lambda: replaced(1, f"{JOB}-1-r1"), "rank 1's replacement Running"
    )
    new = await replaced(1, f"{JOB}-1-r1")
    assert new is not None and node_uuid[str(new.spec.nodeName)] == uuid_a  # type: ignore[union-attr]
    assert new.metadata.labels[plan.DOMAIN_LABEL] == uuid_a  # type: ignore[union-attr,index]
    await _shows_channel(admin, f"{JOB}-1-r1", 1, "configured nodes READY")

    # 4. A failed rank (its node stops) is found lost and replaced on its rack's spare.
    victim = nodes[2]
    spare_b = next(n for n, u in node_uuid.items() if u == uuid_b and n not in nodes)
    await asyncio.to_thread(
        control.request, rack_sim.root / "control.sock", {"op": "stop", "node": victim}
    )

    async def rank2_lost() -> bool:
        return (await launcher.status(api, job))[2].is_lost

    took["rank 2 lost"] = await helpers.within(
        120, rank2_lost, f"rank 2 lost after node {victim} stopped"
    )
    done = await launcher.replace_lost(api, job)
    assert [(r.rank, r.cluster_uuid, r.pod) for r in done] == [(2, uuid_b, f"{JOB}-2-r1")], done
    assert done[0].removed == (f"{JOB}-2: node {victim} not Ready",), done
    took["rank 2 replaced"] = await helpers.within(
        180, lambda: replaced(2, f"{JOB}-2-r1"), "rank 2's replacement Running"
    )
    new = await replaced(2, f"{JOB}-2-r1")
    assert new is not None and str(new.spec.nodeName) == spare_b  # type: ignore[union-attr]
    await _shows_channel(admin, f"{JOB}-2-r1", 2, "configured nodes READY")
    assert not any(s.is_lost for s in await launcher.status(api, job))
    await asyncio.to_thread(
        control.request, rack_sim.root / "control.sock", {"op": "start", "node": victim}
    )

    # 4b. The keeper replaces a rank as soon as it is lost (its pod deleted), once.
    kept: list[launcher.Replaced] = []
    keeping = asyncio.create_task(keeper.Keeper(api, job, on_replaced=kept.append).run())
    try:
        await admin.delete(Pod, f"{JOB}-3", namespace="default")
        took["rank 3 kept"] = await helpers.within(
            180, lambda: replaced(3, f"{JOB}-3-r1"), "rank 3 replaced by the keeper, Running"
        )
    finally:
        keeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeping
    assert [(r.rank, r.cluster_uuid, r.pod) for r in kept] == [(3, uuid_b, f"{JOB}-3-r1")], kept
    new = await replaced(3, f"{JOB}-3-r1")
    assert new is not None and node_uuid[str(new.spec.nodeName)] == uuid_b  # type: ignore[union-attr]
    rank3 = (await launcher.status(api, job))[3]
    assert [p.metadata.name for p in rank3.pods] == [f"{JOB}-3-r1"]  # type: ignore[union-attr]

    # 5. Delete.
    out = cdctl(rack_sim, "delete", JOB).stdout
    assert f"deleted ComputeDomain default/{JOB}-cd" in out, out

    async def job_gone() -> bool:
        pods = [p async for p in admin.list(Pod, namespace="default", labels={"job": JOB})]
        return not pods and await helpers.gone(
            admin, computedomain.ComputeDomainResource, f"{JOB}-cd"
        )

    took["deleted"] = await helpers.within(180, job_gone, "the job's pods and ComputeDomain gone")
    print("job controller e2e (s):", ", ".join(f"{k} {v:.1f}" for k, v in took.items()))
