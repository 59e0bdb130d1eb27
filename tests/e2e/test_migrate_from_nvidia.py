"""docs/upgrade.md's switch from NVIDIA's chart to ours, followed literally under a running domain.

NVIDIA's v25.12.0 driver (its chart and its image, built from its release source; nothing of it is
in this repository) forms a ComputeDomain with a 4-pod workload on a 1 x 6 GB200 rack; then the
steps of "Migrating from NVIDIA's chart to ours with a running workload" run with the commands
as written there (our chart archive filled in): ``helm list``, our CRDs applied server-side,
``cdctl migrate prepare``, ``helm uninstall`` of NVIDIA's release, ``helm install`` of our chart
archive into NVIDIA's namespace with the flags ``cdctl migrate prepare`` printed (the driver root
among them). Then:

* through the switch the workload pods keep their UIDs with 0 restarts, the CD stays Ready, no
  IMEX process of the domain is restarted (pid and start time of each node's ``nvidia-imex``),
  NVIDIA's daemon pods are the same pods, now owned by our DaemonSet (same name, update strategy
  ``OnDelete``), and the ServiceAccount they run as is the same object (UID); helm's uninstall
  reports it kept;
* growing the workload to 5 pods puts our daemon on the new node; the new pod runs with its
  channel; its IMEX writes NVIDIA's node map and reaches the 4 IMEX daemons NVIDIA started
  (one IMEX domain); the domain is Ready with 5 nodes, NVIDIA's IMEX processes
  still untouched;
* NVIDIA's old daemons never log ``Unauthorized``;
* shrinking to 3 releases the freed nodes; deleting the workload and the CD leaves no daemon
  pod, DaemonSet, clique, node label, claim, template or claim CDI spec.

Needs NVIDIA's build, named by two environment variables (docs/upgrade.md): ``CD_NVIDIA_CHART``,
the folder of NVIDIA's chart (``deployments/helm/nvidia-dra-driver-gpu`` of its v25.12.0 source),
and ``CD_NVIDIA_IMAGE``, the folder laid out as its image (``usr/bin/compute-domain-*``,
``templates/``; docs/simulator.md). Without them the test is skipped, saying so.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Event, Node, Pod, ServiceAccount
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate

from compute_domains.api import clique, computedomain, names
from compute_domains.infra import kube
from compute_domains.sim import driverroot, lifecycle, state, toolchain, topology
from tests.conftest import keep_sims
from tests.e2e import guide_steps, helpers

pytestmark = pytest.mark.timeout(1500)
SHAPE = topology.Shape(racks=1, nodes_per_rack=6)
NVIDIA_REPOSITORY = "nvcr.io/nvidia/k8s-dra-driver-gpu"
NS = "nvidia-dra-driver-gpu"
"""NVIDIA's release and namespace, and ours after the switch."""
SA = names.DAEMON_SERVICE_ACCOUNT
JOB = "migrate"
CD = "migrate"


def _nvidia_build() -> tuple[Path, Path]:
    chart, image = os.environ.get("CD_NVIDIA_CHART", ""), os.environ.get("CD_NVIDIA_IMAGE", "")
    if not chart or not image:
        pytest.skip(
            "NVIDIA's v25.12.0 build is not named: set CD_NVIDIA_CHART (its chart folder) and "
            "CD_NVIDIA_IMAGE (its image folder) to run the migration from NVIDIA's driver"
        )
    for what, path in (("CD_NVIDIA_CHART", chart), ("CD_NVIDIA_IMAGE", image)):
        if not Path(path).is_dir():
            pytest.fail(f"{what}={path} is not a folder")
    return Path(chart), Path(image)


@pytest.fixture(scope="module")
def nvidia_sim(toolset: toolchain.Toolset, sim_home: Path) -> Iterator[state.SimPaths]:
    """A 1 x 6 sim without our driver, NVIDIA's image folder serving its repository."""
    _, image = _nvidia_build()
    paths = state.SimPaths(sim_home, "migrate")
    started = lifecycle.start(
        paths,
        toolset.bin_dir,
        die_with_parent=True,
        shape=SHAPE,
        image_map=((NVIDIA_REPOSITORY, image),),
    )
    try:
        yield paths
    finally:
        lifecycle.stop(paths, process=started.process, remove=not keep_sims())


def _run(sim: state.SimPaths, line: str, cwd: Path) -> str:
    """One command of the doc as a shell line, with the sim's tools and cluster."""
    bins = Path(state.read_state(sim).bin_dir)  # type: ignore[union-attr]
    cdctl = Path(sys.executable).parent  # this checkout's cdctl
    path = f"{bins}:{cdctl}:{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "KUBECONFIG": str(sim.kubeconfig)}
    res = subprocess.run(
        line, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert res.returncode == 0, f"`{line}` failed ({res.returncode}):\n{res.stdout}{res.stderr}"
    return res.stdout


async def _workload(admin: AsyncClient) -> dict[str, Any]:
    """Workload pod name → (uid, node, restarts, ready)."""
    out = {}
    async for p in admin.list(Pod, namespace="default", labels={"job": JOB}):
        assert p.metadata is not None and p.spec is not None and p.status is not None
        restarts = sum(c.restartCount for c in p.status.containerStatuses or [])
        out[str(p.metadata.name)] = (p.metadata.uid, p.spec.nodeName, restarts, helpers.ready(p))
    return out


async def _cd(admin: AsyncClient) -> dict[str, Any]:
    obj = await admin.get(computedomain.ComputeDomainResource, CD, namespace="default")
    doc: dict[str, Any] = obj.to_dict()  # type: ignore[no-untyped-call]
    return doc


async def _cd_ready(admin: AsyncClient, nodes: int) -> bool:
    status = (await _cd(admin)).get("status") or {}
    entries = status.get("nodes") or []
    return (
        status.get("status") == "Ready"
        and len(entries) == nodes
        and all(n["status"] == "Ready" for n in entries)
    )


async def _scaled(admin: AsyncClient, sim: state.SimPaths, replicas: int) -> dict[str, Any]:
    """Scale the workload; returns its pods once ``replicas`` run and the CD is Ready with as
    many nodes."""
    await asyncio.to_thread(
        helpers.kubectl, sim, "scale", "deployment", JOB, "-n", "default", f"--replicas={replicas}"
    )

    async def settled() -> bool:
        pods = await _workload(admin)
        return len(pods) == replicas and all(p[3] for p in pods.values())

    took = await helpers.within(300, settled, f"{replicas} workload pods Running")
    await helpers.within(120, lambda: _cd_ready(admin, replicas), f"CD Ready with {replicas}")
    print(f"scaled to {replicas}: pods Running and CD Ready {took:.1f}s+")
    return await _workload(admin)


async def _daemon_pods(admin: AsyncClient, uid: str) -> list[Pod]:
    """The CD's daemon pods in NVIDIA's namespace (ours after the switch)."""
    return [
        p async for p in admin.list(Pod, namespace=NS, labels={names.COMPUTE_DOMAIN_LABEL: uid})
    ]


async def _daemons(admin: AsyncClient, uid: str) -> dict[str, tuple[str, str, str]]:
    """The CD's live daemon pods: node → (pod uid, program, owner uid)."""
    out = {}
    for p in await _daemon_pods(admin, uid):
        assert p.metadata is not None and p.spec is not None
        if p.metadata.deletionTimestamp is not None:
            continue
        owner = next((o.uid for o in p.metadata.ownerReferences or [] if o.controller), "")
        program = (p.spec.containers[0].command or [""])[0]
        out[str(p.spec.nodeName)] = (str(p.metadata.uid), program, owner)
    return out


def _nodes_cfg(sim: state.SimPaths, node: str, uid: str) -> str:
    """The IMEX node map the domain's daemon on ``node`` wrote (in the per-domain folder)."""
    folder = sim.node_root(node) / "var/lib/kubelet/plugins" / names.DRIVER_NAME / "domains"
    return (folder / uid / "nodes.cfg").read_text()


async def _unauthorized(admin: AsyncClient, pods: list[str]) -> list[str]:
    """The lines of NVIDIA's daemons' logs that say a request was refused its credentials."""
    lines = []
    for pod in pods:
        log = await helpers.log_of(admin, pod, NS)
        lines += [f"{pod}: {line}" for line in log.splitlines() if "Unauthorized" in line]
    return lines


async def _nothing_left(admin: AsyncClient, sim: state.SimPaths) -> list[str]:
    """Every object and node file of any ComputeDomain still there."""
    cd_label: dict[str, Any] = {names.COMPUTE_DOMAIN_LABEL: None}
    kinds: list[tuple[str, Any, dict[str, Any] | None]] = [
        ("daemon pod", Pod, cd_label),
        ("DaemonSet", DaemonSet, cd_label),
        ("clique", clique.ComputeDomainCliqueResource, None),
        ("template", ResourceClaimTemplate, cd_label),
        ("claim", ResourceClaim, None),
        ("CD", computedomain.ComputeDomainResource, None),
    ]
    left = [
        f"{what} {o.metadata.name}"
        for what, kind, labels in kinds
        async for o in admin.list(kind, namespace="*", labels=labels)
    ]
    left += [f"label on {n.metadata.name}" async for n in admin.list(Node, labels=cd_label)]  # type: ignore[union-attr]
    for node in (s.name for s in topology.nodes(SHAPE)):
        cdi = sim.node_root(node) / "var/run/cdi"
        left += [f"CDI {f.name} on {node}" for f in cdi.glob("*claim*")]
    return left


async def test_switch_from_nvidias_chart_under_a_running_domain(
    nvidia_sim: state.SimPaths, packaged_chart: Path
) -> None:
    sim = nvidia_sim
    nvidia_chart, _ = _nvidia_build()
    work = Path(tempfile.mkdtemp(prefix="cdmig-", dir="/tmp"))
    archive = work / packaged_chart.name
    archive.write_bytes(packaged_chart.read_bytes())
    admin = kube.client(kube.KubeSettings(kubeconfig=sim.kubeconfig, field_manager="tests"))
    try:
        # NVIDIA's driver as docs/simulator.md installs it, and a domain it forms.
        _run(
            sim,
            f"helm upgrade --install {NS} {nvidia_chart} -n {NS} --create-namespace "
            f"--set resources.gpus.enabled=false --set nvidiaDriverRoot={driverroot.DRIVER_ROOT} "
            "--wait --timeout 300s",
            work,
        )
        await admin.create(
            computedomain.ComputeDomainResource.from_dict(
                {
                    "metadata": {"name": CD, "namespace": "default"},
                    "spec": {
                        "numNodes": 0,
                        "channel": {"resourceClaimTemplate": {"name": f"{CD}-rct"}},
                    },
                }
            )
        )
        await admin.create(helpers.workload_deployment(JOB, f"{CD}-rct", 4))

        async def formed() -> bool:
            pods = await _workload(admin)
            return len(pods) == 4 and all(p[3] for p in pods.values())

        took = await helpers.within(300, formed, "NVIDIA's domain: 4 workload pods Running")
        await helpers.within(120, lambda: _cd_ready(admin, 4), "NVIDIA's CD Ready with 4 nodes")
        print(f"NVIDIA formed the domain: {took:.1f}s")
        uid = (await _cd(admin))["metadata"]["uid"]
        before = await _workload(admin)
        nvidias = await _daemons(admin, uid)
        assert {d[1] for d in nvidias.values()} == {"compute-domain-daemon"}, nvidias
        imex_before = helpers.imex_processes(sim)
        assert set(imex_before) == set(nvidias), (imex_before, nvidias)
        sa_uid = (await admin.get(ServiceAccount, SA, namespace=NS)).metadata.uid  # type: ignore[union-attr]
        old_ds = await admin.get(DaemonSet, names.daemon_object_name(uid), namespace=NS)

        # Steps 1-4 of docs/upgrade.md, as written.
        _run(sim, "helm list -A | grep nvidia-dra-driver-gpu", work)
        t0 = time.monotonic()
        _run(
            sim,
            f"tar -xzf {archive.name} compute-domains/crds && "
            "kubectl apply --server-side --force-conflicts -f compute-domains/crds/",
            work,
        )
        prepared = _run(sim, f"cdctl migrate prepare -n {NS}", work)
        print(prepared)
        flags = prepared.split("values for helm install: ", 1)[1].strip()
        assert f'nvidiaDriverRoot="{driverroot.DRIVER_ROOT}"' in flags, prepared
        uninstalled = _run(sim, f"helm uninstall {NS} -n {NS}", work)
        assert f"[ServiceAccount] {SA}" in uninstalled, uninstalled
        _run(sim, f"helm install compute-domains ./{archive.name} -n {NS} {flags} --wait", work)
        print(f"switched (steps 2-4): {time.monotonic() - t0:.1f}s")

        # The domain is ours, whole: our DaemonSet owns NVIDIA's running daemons.
        async def taken_over() -> dict[str, Any] | None:
            ds = await admin.get(DaemonSet, names.daemon_object_name(uid), namespace=NS)
            now = await _daemons(admin, uid)
            assert ds.metadata is not None and ds.spec is not None
            mine = (ds.spec.template.spec.containers[0].command or [""])[0] == "cdctl"  # type: ignore[union-attr]
            owned = all(d[2] == ds.metadata.uid for d in now.values())
            return {"ds": ds, "daemons": now} if mine and owned and len(now) == 4 else None

        found = await helpers.within(60, taken_over, "our DaemonSet adopts NVIDIA's daemons")
        took_over = await taken_over()
        assert took_over is not None
        ds = took_over["ds"]
        assert ds.metadata.uid != old_ds.metadata.uid  # type: ignore[union-attr]
        assert ds.spec.updateStrategy.type == "OnDelete", ds.spec.updateStrategy
        assert {n: d[:2] for n, d in took_over["daemons"].items()} == {
            n: d[:2] for n, d in nvidias.items()
        }, "NVIDIA's daemon pods were replaced"
        print(f"our DaemonSet owns NVIDIA's 4 daemons {found:.1f}s after helm returned")
        assert (await admin.get(ServiceAccount, SA, namespace=NS)).metadata.uid == sa_uid  # type: ignore[union-attr]
        # Step 6: each plugin took over its node's claims (4 workload, 4 daemon claims).
        plugin_logs = "".join(
            [
                await helpers.log_of(admin, str(p.metadata.name), NS)
                async for p in admin.list(
                    Pod, namespace=NS, labels={"app.kubernetes.io/component": "kubelet-plugin"}
                )
            ]
        )
        adopted = plugin_logs.count("from NVIDIA's checkpoint: PrepareCompleted there")
        assert adopted == 8, plugin_logs[-3000:]
        for node in nvidias:
            folder = sim.node_root(node) / "var/lib/kubelet/plugins" / names.DRIVER_NAME
            assert (folder / "checkpoint.json.nvidia-v25.12").is_file(), node
        assert await _cd_ready(admin, 4)
        assert await _workload(admin) == before, "the workload changed under the switch"
        assert all(p[2] == 0 for p in before.values()), before
        assert helpers.imex_processes(sim) == imex_before, "an IMEX restarted in the switch"
        events = [
            e.message or ""
            async for e in admin.list(Event, namespace="default")
            if e.reason == "DaemonSetCreated"
        ]
        assert any("adopts NVIDIA's running daemons" in m for m in events), events

        # Grow: a new node gets our daemon and joins NVIDIA's running IMEX domain.
        grown = await _scaled(admin, sim, 5)
        assert {k: v for k, v in grown.items() if k in before} == before
        (new_pod,) = set(grown) - set(before)
        new_node = grown[new_pod][1]
        # One IMEX domain: the new node's IMEX has NVIDIA's node map (IMEX knows a domain only
        # by it) and reaches the 4 IMEX daemons NVIDIA started.
        await guide_steps.reaches_peers(admin, new_pod, 4)
        maps = {n: _nodes_cfg(sim, n, uid) for n in (*nvidias, new_node)}
        assert len(set(maps.values())) == 1, maps
        assert "compute-domain-daemon-0000\n" in maps[new_node], maps[new_node]
        daemons = await _daemons(admin, uid)
        assert daemons[new_node][1] == "cdctl", daemons
        assert {n: d[:2] for n, d in daemons.items() if n != new_node} == {
            n: d[:2] for n, d in nvidias.items()
        }
        imex_now = helpers.imex_processes(sim)
        assert {n: imex_now[n] for n in imex_before} == imex_before, "an IMEX restarted"
        assert new_node in imex_now
        print(f"IMEX (pid, start) per node before the switch: {imex_before}; grown: {imex_now}")
        old_pods = [
            p.metadata.name  # type: ignore[union-attr]
            for p in await _daemon_pods(admin, uid)
            if p.spec.containers[0].command[0] == "compute-domain-daemon"  # type: ignore[union-attr, index]
        ]
        assert len(old_pods) == 4
        assert not await _unauthorized(admin, [str(p) for p in old_pods])

        # Shrink: freed nodes leave the domain (their daemons go, their labels too).
        shrunk = await _scaled(admin, sim, 3)
        kept = {p[1] for p in shrunk.values()}

        async def released() -> bool:
            labelled = {
                n.metadata.name  # type: ignore[union-attr]
                async for n in admin.list(Node, labels={names.COMPUTE_DOMAIN_LABEL: uid})
            }
            return labelled == kept and set(await _daemons(admin, uid)) == kept

        await helpers.within(120, released, "freed nodes unlabelled, their daemons gone")
        survivors = [
            str(p.metadata.name)  # type: ignore[union-attr]
            for p in await _daemon_pods(admin, uid)
            if p.spec.containers[0].command[0] == "compute-domain-daemon"  # type: ignore[union-attr, index]
        ]
        assert not await _unauthorized(admin, survivors)

        # Delete: nothing of the domain is left.
        await asyncio.to_thread(
            helpers.kubectl, sim, "delete", "deployment", JOB, "-n", "default", "--wait=true"
        )
        await asyncio.to_thread(
            helpers.kubectl, sim, "delete", "computedomain", CD, "-n", "default", "--wait=true"
        )
        left: list[str] = []

        async def nothing_left() -> bool:
            left[:] = await _nothing_left(admin, sim)
            return not left

        await helpers.within(180, nothing_left, f"nothing of the domain left ({left})")
    finally:
        await admin.close()
        shutil.rmtree(work, ignore_errors=True)
