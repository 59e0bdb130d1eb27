"""The daemon on simulated GB200 nodes: one IMEX domain per clique, stable indices, readiness.

No kubelet plugin runs: daemon pods are made by hand (see ``pods.py``); the controller runs and
assigns the clique indices. Covered: three daemons get indices 0..2 from the controller without
a single refused clique write, report Ready, and their IMEX daemons form an UP domain; a
force-deleted daemon's replacement keeps the node's index and no IMEX process outlives it; a
gracefully deleted daemon removes its entry; the last daemons' entries go with them and the
clique with the CD; a 19th-node situation (a full clique) is reported and resolved when a slot
frees up; a node without a clique idles; an IMEX that keeps failing is restarted with back-off.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx2 as httpx
import pytest
from lightkube import AsyncClient
from lightkube.models.core_v1 import Container, EnvVar, VolumeMount
from lightkube.resources.core_v1 import Pod

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource, Readiness
from compute_domains.daemon import events, imexconfig
from compute_domains.sim import state
from tests.integration.daemon import pods
from tests.integration.daemon.conftest import StartController
from tests.integration.daemon.pods import NODES
from tests.integration.helpers import wait_for, wait_gone

pytestmark = pytest.mark.integration


def _clique_name(cd: Any, clique_id: str) -> str:
    return names.clique_object_name(cd.metadata.uid, clique_id)


async def _create(admin: AsyncClient, pod: Pod) -> None:
    await admin.create(pod)


async def test_three_daemons_form_one_domain_with_stable_indices(
    admin: AsyncClient,
    daemon_sim: state.SimPaths,
    driver_ns: str,
    compute_domain: Any,
    pod_owner: Any,
    start_controller: StartController,
) -> None:
    cd, ns = compute_domain, driver_ns
    await start_controller(3)
    clique_id = await pods.node_clique(admin, NODES[0])
    assert {await pods.node_clique(admin, n) for n in NODES} == {clique_id}
    name = _clique_name(cd, clique_id)
    spec = {"ns": ns, "cd": cd, "clique_id": clique_id, "max_nodes": 3, "owner": pod_owner}
    for i, node in enumerate(NODES):
        await _create(admin, pods.daemon_pod(f"daemon-{i}", node, **spec))
    clique = await pods.wait_clique(admin, ns, name, pods.all_ready(set(NODES)))
    indices = {d.node_name: d.index for d in clique.daemons}
    assert sorted(indices.values()) == [0, 1, 2]
    assert clique.domain_uid == cd.metadata.uid and clique.clique_id == clique_id
    running = {i: await pods.wait_ready(admin, f"daemon-{i}", ns) for i in range(3)}
    for i, node in enumerate(NODES):
        pod = running[i]
        assert pod.metadata.labels[names.CLIQUE_ID_LABEL] == clique_id
        entry = clique.daemon(node)
        assert entry is not None and entry.ip_address == pod.status.podIP
    owners = clique.metadata.ownerReferences or []
    assert {o.name for o in owners if o.kind == "Pod"} == {"daemon-0", "daemon-1", "daemon-2"}
    assert {o.kind for o in owners} == {"Pod", "DaemonSet"}  # the CD's DaemonSet keeps it too
    assert all(not o.controller and not o.blockOwnerDeletion for o in owners)
    report = await pods.wait_domain_up(daemon_sim.root, running[0].status.podIP, 3)
    # The CD's own names (its infix), not NVIDIA's: unique to this IMEX domain.
    assert {n["host"] for n in report["nodes"].values()} == {
        names.imex_dns_name(i, str(cd.metadata.uid)) for i in range(3)
    }
    await _workload_sees_the_domain(admin, ns, running[0].status.podIP, indices[NODES[0]])
    for pod in running.values():  # each daemon serves its metrics on its pod IP
        async with httpx.AsyncClient() as http:
            url = f"http://{pod.status.podIP}:{pods.METRICS_PORT}/metrics"
            page = (await http.get(url, timeout=10)).text
        for verb in ("create", "update", "patch"):  # no daemon ever had a clique write refused
            assert f'compute_domains_daemon_clique_conflicts_total{{verb="{verb}"}} 0.0' in page

    # Force-delete node 1's daemon (SIGKILL, no deregistration): its IMEX dies with it, and
    # the replacement on the same node keeps the node's index.
    await admin.delete(Pod, "daemon-1", namespace=ns, grace_period=0)
    await pods.wait_no_imex("daemon-1")
    await _create(admin, pods.daemon_pod("daemon-1b", NODES[1], **spec))
    new = await pods.wait_ready(admin, "daemon-1b", ns)

    def replaced(c: Any) -> bool:
        entry = c.daemon(NODES[1])
        return (
            pods.all_ready(set(NODES))(c)
            and entry is not None
            and entry.ip_address == new.status.podIP
        )

    clique = await pods.wait_clique(admin, ns, name, replaced)
    assert {d.node_name: d.index for d in clique.daemons} == indices
    # The peers re-resolve the replaced name by SIGUSR1 (IMEX itself is not restarted).
    for peer in ("daemon-0", "daemon-2"):
        log = await pods.wait_log(admin, peer, ns, "re-establishing all outgoing connections")
        assert "sent SIGUSR1" in log
        assert "SIGUSR1 received less than" not in log
        assert log.count("started nvidia-imex (pid") == 1
    await pods.wait_domain_up(daemon_sim.root, new.status.podIP, 3)
    await pods.wait_domain_up(daemon_sim.root, running[0].status.podIP, 3)

    # A graceful delete removes the daemon's own entry and stops its IMEX.
    await admin.delete(Pod, "daemon-2", namespace=ns)
    clique = await pods.wait_clique(admin, ns, name, pods.all_ready({NODES[0], NODES[1]}))
    assert {d.node_name: d.index for d in clique.daemons} == {
        NODES[0]: indices[NODES[0]],
        NODES[1]: indices[NODES[1]],
    }
    await pods.wait_no_imex("daemon-2")

    # With the last daemon pods gone, their entries go (the DaemonSet keeps the clique and the
    # indices it remembers while the CD lives); the CD's deletion takes the clique along.
    for pod in ("daemon-0", "daemon-1b"):
        await admin.delete(Pod, pod, namespace=ns)
    await pods.wait_clique(admin, ns, name, lambda c: not c.daemons)
    await admin.delete(ComputeDomainResource, cd.metadata.name, namespace=ns)
    await wait_gone(admin, ComputeDomainCliqueResource, name, ns, timeout=90)


async def _workload_sees_the_domain(admin: AsyncClient, ns: str, ip: str, index: int) -> None:
    """The seed's ``mnnvl-workload`` reports the domain of its node's daemon (no plugin runs
    here, so it has no channel device and its verdict is NOT READY)."""
    await _create(admin, pods.workload_pod("workload", NODES[0], ns=ns, daemon_ip=ip))
    log = await pods.wait_log(admin, "workload", ns, "mnnvl-workload: NOT READY")
    assert "IMEX channels: none" in log
    assert "IMEX domain: UP, 3/3 configured nodes READY" in log
    assert f"rank: {index} (from local IMEX node ID" in log
    assert "NOT READY: channels=0 domain=UP" in log
    await admin.delete(Pod, "workload", namespace=ns)


async def test_a_full_clique_is_reported_and_the_node_joins_when_a_slot_frees(
    admin: AsyncClient,
    driver_ns: str,
    compute_domain: Any,
    pod_owner: Any,
    start_controller: StartController,
) -> None:
    cd, ns = compute_domain, driver_ns
    await start_controller(2)
    clique_id = await pods.node_clique(admin, NODES[0])
    name = _clique_name(cd, clique_id)
    spec = {"ns": ns, "cd": cd, "clique_id": clique_id, "max_nodes": 2, "owner": pod_owner}
    for i, node in enumerate(NODES):
        await _create(admin, pods.daemon_pod(f"daemon-{i}", node, **spec))

    def two_ready(c: Any) -> bool:
        return len(c.daemons) == 2 and all(d.status is Readiness.READY for d in c.daemons)

    clique = await pods.wait_clique(admin, ns, name, two_ready)
    listed = {d.node_name for d in clique.daemons}
    (left_out,) = [i for i, n in enumerate(NODES) if n not in listed]
    waiting = f"daemon-{left_out}"

    async def reported() -> list[Any]:
        while not (found := await pods.events_for(admin, ns, waiting, "CliqueFull")):
            await asyncio.sleep(0.5)
        return found

    (event,) = await asyncio.wait_for(reported(), 60)
    assert event.type == "Warning" and "is full" in (event.message or "")
    assert "is full" in await pods.log_of(admin, waiting, ns, "compute-domain-daemon")
    # An absence, watched for three probe periods (probes run every second): a daemon that
    # let IMEX start or passed its probe would have turned Ready within them.
    loop = asyncio.get_running_loop()
    end = loop.time() + 3.0
    while loop.time() < end:
        assert not pods.is_ready(await admin.get(Pod, waiting, namespace=ns))
        await asyncio.sleep(0.25)
    assert pods.imex_pids(waiting) == []

    (freed,) = [i for i in range(3) if i != left_out][:1]
    freed_index = clique.daemon(NODES[freed]).index  # type: ignore[union-attr]
    await admin.delete(Pod, f"daemon-{freed}", namespace=ns)
    remaining = set(NODES) - {NODES[freed]}
    clique = await pods.wait_clique(admin, ns, name, pods.all_ready(remaining))
    assert clique.daemon(NODES[left_out]).index == freed_index  # type: ignore[union-attr]
    await pods.wait_ready(admin, waiting, ns)


async def test_a_node_without_a_clique_idles_and_is_ready(
    admin: AsyncClient, driver_ns: str, compute_domain: Any
) -> None:
    ns = driver_ns
    pod = pods.daemon_pod(
        "daemon-plain", NODES[0], ns=ns, cd=compute_domain, clique_id="", max_nodes=18
    )
    await _create(admin, pod)
    await pods.wait_ready(admin, "daemon-plain", ns)
    # The label and readiness are independent (the probe passes at once without a clique).
    labelled = await wait_for(
        admin,
        Pod,
        "daemon-plain",
        lambda p: names.CLIQUE_ID_LABEL in ((p.metadata and p.metadata.labels) or {}),
        namespace=ns,
        timeout=60,
    )
    assert labelled.metadata.labels[names.CLIQUE_ID_LABEL] == ""  # type: ignore[union-attr,index]
    assert [c async for c in admin.list(ComputeDomainCliqueResource, namespace=ns)] == []
    assert pods.imex_pids("daemon-plain") == []


async def test_an_imex_that_keeps_failing_is_restarted_with_backoff(
    admin: AsyncClient,
    daemon_sim: state.SimPaths,
    driver_ns: str,
    compute_domain: Any,
    pod_owner: Any,
    start_controller: StartController,
) -> None:
    """The simulated IMEX refuses to start (NV_ERR_IN_USE, as with a host nvidia-imex.service
    holding the session) while a fault flag exists; each refusal is reported as
    ImexSessionInUse on the pod and on the CD; a sidecar removes the flag after a while, and
    the next restart comes up."""
    ns = driver_ns
    await start_controller(1)
    clique_id = await pods.node_clique(admin, NODES[2])
    template = imexconfig.DEFAULT_TEMPLATE + "SIM_FAULT_DIR=/imexd/faults\n"
    mount = [VolumeMount(name="imexd", mountPath="/imexd")]
    init = Container(
        name="faulty-template",
        image=pods.IMAGE,
        command=[
            "sh",
            "-c",
            "mkdir -p /imexd/faults && touch /imexd/faults/session-in-use && "
            'printf "%s" "$TEMPLATE" > /imexd/imexd.cfg.tmpl',
        ],
        env=[EnvVar(name="TEMPLATE", value=template)],
        volumeMounts=mount,
    )
    healer = Container(
        name="healer",
        image=pods.IMAGE,
        command=["sh", "-c", "sleep 9; rm -f /imexd/faults/session-in-use; exec sleep 3600"],
        volumeMounts=mount,
    )
    pod = pods.daemon_pod(
        "daemon-crashy",
        NODES[2],
        ns=ns,
        cd=compute_domain,
        clique_id=clique_id,
        max_nodes=1,
        owner=pod_owner,
        init=[init],
        sidecars=[healer],
    )
    await _create(admin, pod)
    ready = await pods.wait_ready(admin, "daemon-crashy", ns, timeout=180)
    restarts = await pods.events_for(admin, ns, "daemon-crashy", "ImexRestarted")
    delays = sorted(
        (int(m.group(1)), float(m.group(2)))
        for e in restarts
        if (m := re.search(r"restart #(\d+) in ([\d.]+)s", e.message or ""))
    )
    assert len(delays) >= 3, delays
    assert [d for _, d in delays] == sorted(d for _, d in delays), "back-off must grow"
    assert delays[-1][1] > 2 * delays[0][1]
    log = await pods.log_of(admin, "daemon-crashy", ns, "compute-domain-daemon")
    assert "NV_ERR_IN_USE" in log
    # Not a silent retry: the pod and the CD each get a Warning naming the node and the fix
    # (upstream #524), one Event whose count grows with the retries.
    cd_name = compute_domain.metadata.name
    for involved in ("daemon-crashy", cd_name):
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            found = await pods.events_for(admin, ns, involved, events.IMEX_SESSION_IN_USE)
            if found and (found[0].count or 1) >= 2:
                break
            assert asyncio.get_running_loop().time() < deadline, (involved, found)
            await asyncio.sleep(0.5)
        (event,) = found
        assert event.type == "Warning" and event.involvedObject.uid in (
            ready.metadata.uid,  # type: ignore[union-attr]
            compute_domain.metadata.uid,
        )
        assert f"node {NODES[2]}" in (event.message or "")
        assert "host nvidia-imex.service" in (event.message or "")
        assert "systemctl mask nvidia-imex.service" in (event.message or "")
    clique = await pods.wait_clique(
        admin, ns, _clique_name(compute_domain, clique_id), pods.all_ready({NODES[2]})
    )
    assert clique.daemon(NODES[2]).ip_address == ready.status.podIP  # type: ignore[union-attr]
    await pods.wait_domain_up(daemon_sim.root, ready.status.podIP, 1)
