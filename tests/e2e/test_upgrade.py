"""Upstream H1 (downgrade) and H2 (upgrade) with Helm while a ComputeDomain workload runs.

The previous release is built from commit ``PREVIOUS`` of our history, stamped
``PREVIOUS_VERSION``: ``sim.releases`` installs it into a venv of its own and offers it to this
module's sim under that image tag, so its chart's pods run its ``cdctl`` while the checkout's
chart (image tag ``__version__``) runs this checkout; every check of "which version runs" looks
at the pods' processes, not at labels. A commit, not the tag ``v0.1.0``: every full clone has
it (a tag may be missing), and v0.1.0's daemon runs ``nvidia-imex`` from the image's ``PATH``,
which neither a GB200 node nor the simulator gives (IMEX comes from the driver root through
the plugin's base CDI spec), so v0.1.0 cannot form a domain on today's simulator.
Two nodes; the workload is two ``mnnvl-workload`` pods, one per node, in one ComputeDomain.

* H1 "downgrade: current-dev -> last-stable": install the checkout's chart, start the workload
  (Ready <= 60 s, each pod reports its channel and an UP domain), ``helm upgrade`` to the previous
  chart without downgrading the CRDs. The workload pods keep running untouched (same pods, no
  restart, their claims still prepared in the old plugin's checkpoint and their CDI specs in
  place), the driver's pods run the previous release, the domain stays Ready.
  Deleting the workload: pods gone <= 10 s, then nothing is left. A fresh A1 cycle works.
* H2 "upgrade: wipe-state, install-last-stable, upgrade-to-current-dev": ``helm uninstall``
  (driver pods gone <= 10 s), wipe the plugin folders, delete the CRDs (<= 10 s), install the
  previous chart, start the workload (Ready <= 60 s), apply the current CRDs (the explicit
  upgrade step of docs/upgrade.md), ``helm upgrade`` to the checkout's chart: the same checks
  with the versions swapped; deleting the old workload: pods gone <= 60 s. A fresh A1 cycle works.
"""

from __future__ import annotations

import asyncio
import json
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
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate

import compute_domains
from compute_domains.api import clique, computedomain, names
from compute_domains.cli import options
from compute_domains.sim import driver, lifecycle, releases, state, toolchain, topology
from tests.conftest import keep_sims
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_seed_example import _follow_log, sees_domain_up

pytestmark = pytest.mark.timeout(1800)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
NODES = tuple(f"gb200-r0-n{n:02d}" for n in range(2))
PREVIOUS = "457bc7e9569951871d0c711e9d51464e905c43e0"
"""The commit the previous release is built from: the first whose daemon takes ``nvidia-imex``
from the node's driver root (through the plugin's base CDI spec), as a GB200 node requires, and
whose tree is whole (ec71a77 and 00700fb import a module committed later). Its chart lacks
NVIDIA's keys and the values schema; its plugin, controller and daemon predate ``infra.kube``."""
PREVIOUS_VERSION = "0.2.0-dev.1"
"""The version that build is stamped with (its tree says 0.2.0, as this checkout does)."""
WORKLOAD = "upgrade"
A1 = "imex-channel-injection"
CHECKOUT_CDCTL = str(Path(sys.executable).parent / "cdctl")
PLUGIN_DIR = Path("var/lib/kubelet/plugins") / names.DRIVER_NAME
# Two nodes make a two-node NVLink domain: IMEX lists two peers and reports UP with both.
# Two controller replicas on both sides (one is the default now, two at the earlier release):
# the switch is a leader handover between them.
VALUES = ("controller.maxNodesPerImexDomain=2", "controller.replicas=2")
CRDS = ("computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com")


@pytest.fixture(scope="module")
def release() -> releases.Release:
    """The previous release installed in its own venv (about a minute the first time, then
    cached)."""
    return releases.prepare(
        releases.ReleaseSettings(
            repo=options.repo_root(),
            ref=PREVIOUS,
            version=PREVIOUS_VERSION,
            cache_root=options.cache_root().parent / "releases",
        )
    )


@pytest.fixture(scope="module")
def rack_sim(toolset: toolchain.Toolset, release: releases.Release) -> Iterator[state.SimPaths]:
    """A two-node sim without the driver, in a sim home of its own that offers the previous
    release."""
    home = Path(tempfile.mkdtemp(prefix="cdup-", dir="/tmp"))
    releases.link(release, home)
    paths = state.SimPaths(home, "upgrade")
    started = lifecycle.start(paths, toolset.bin_dir, die_with_parent=True, shape=SHAPE)
    yield paths
    lifecycle.stop(paths, process=started.process, remove=not keep_sims())
    shutil.rmtree(home, ignore_errors=True)


async def _install(sim: state.SimPaths, chart: Path) -> None:
    """``helm upgrade --install`` as users do (``--wait``: the driver's rollout is done)."""
    bins = Path(state.read_state(sim).bin_dir)  # type: ignore[union-attr]
    settings = driver.DriverSettings(chart=chart, values=VALUES)
    await driver.install(settings, bins / "helm", sim.kubeconfig)


def _cdctl_processes(sim: state.SimPaths, role: str) -> list[str]:
    """The ``cdctl`` script each live ``cdctl <role> run`` container of this sim runs.

    Containers are children of the sim's supervisor (its node agent execs them in place), and
    a console script's command line is ``<venv python> <venv>/bin/cdctl <role> run``.
    """
    supervisor = state.read_state(sim).supervisor_pid  # type: ignore[union-attr]
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (entry / "cmdline").read_bytes().decode().split("\0")[:-1]
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == supervisor and argv[-2:] == [role, "run"] and len(argv) >= 3:
            found.append(argv[-3])
    return sorted(found)


async def _runs(sim: state.SimPaths, cdctl: str, counts: dict[str, int], timeout: float) -> None:
    """Every driver component runs ``cdctl`` (and nothing else does), as many as ``counts``."""

    deadline = time.monotonic() + timeout
    while True:
        seen = {role: _cdctl_processes(sim, role) for role in counts}
        if all(seen[role] == [cdctl] * n for role, n in counts.items()):
            return
        assert time.monotonic() < deadline, f"not all running {cdctl} in {timeout:.0f}s: {seen}"
        await asyncio.sleep(0.5)


async def _cd(admin: AsyncClient, name: str) -> dict[str, Any]:
    obj = await admin.get(computedomain.ComputeDomainResource, name, namespace="default")
    doc: dict[str, Any] = obj.to_dict()  # type: ignore[no-untyped-call]
    return doc


async def _cd_ready(admin: AsyncClient, name: str, nodes: int) -> bool:
    status = (await _cd(admin, name)).get("status") or {}
    entries = status.get("nodes") or []
    return (
        status.get("status") == "Ready"
        and len(entries) == nodes
        and all(n["status"] == "Ready" for n in entries)
    )


async def _workloads(admin: AsyncClient) -> list[Pod]:
    pods = [p async for p in admin.list(Pod, namespace="default", labels={"job": WORKLOAD})]
    return sorted(pods, key=lambda p: str(p.metadata.name))  # type: ignore[union-attr]


async def _start_workload(admin: AsyncClient) -> None:
    """The CD and its two workload pods, Ready within H1/H2's 60 s, each with its channel."""
    t0 = time.monotonic()
    await admin.create(
        computedomain.ComputeDomainResource(
            metadata=ObjectMeta(name=WORKLOAD, namespace="default"),
            spec={"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": f"{WORKLOAD}-rct"}}},
        )
    )
    await admin.create(helpers.workload_deployment(WORKLOAD, f"{WORKLOAD}-rct", 2))

    async def running() -> bool:
        pods = await _workloads(admin)
        return len(pods) == 2 and all(helpers.ready(p) for p in pods)

    await helpers.within(60 - (time.monotonic() - t0), running, "H1/H2: workload Ready")
    for pod in await _workloads(admin):
        await sees_domain_up(admin, str(pod.metadata.name))  # type: ignore[union-attr]
    await helpers.within(60, lambda: _cd_ready(admin, WORKLOAD, 2), "CD Ready with 2 nodes")
    print(f"workload Ready with its channel, CD Ready: {time.monotonic() - t0:.1f}s")


async def _held(admin: AsyncClient, sim: state.SimPaths | None) -> dict[str, Any]:
    """Per workload pod: identity, restarts, start time, node, claim (and, with ``sim``, its
    checkpoint state and CDI spec files on the node)."""
    out: dict[str, Any] = {}
    for pod in await _workloads(admin):
        assert pod.metadata is not None and pod.spec is not None and pod.status is not None
        cs = (pod.status.containerStatuses or [])[0]
        claim = (pod.status.resourceClaimStatuses or [])[0].resourceClaimName
        claim_obj = await admin.get(ResourceClaim, str(claim), namespace="default")
        uid = str(claim_obj.metadata.uid)  # type: ignore[union-attr]
        entry: dict[str, Any] = {
            "uid": pod.metadata.uid,
            "node": pod.spec.nodeName,
            "restarts": cs.restartCount,
            "started": cs.state.running.startedAt if cs.state and cs.state.running else None,
            "ready": helpers.ready(pod),
            "claim": uid,
            "reserved": [r.uid for r in claim_obj.status.reservedFor or []],  # type: ignore[union-attr]
        }
        if sim is not None:
            node_root = sim.node_root(str(pod.spec.nodeName))
            doc = json.loads((node_root / PLUGIN_DIR / "checkpoint.json").read_text())
            entry["checkpoint"] = (doc["claims"].get(uid) or {}).get("state")
            entry["cdi"] = bool(list((node_root / "var/run/cdi").glob(f"*{uid}*")))
        out[str(pod.metadata.name)] = entry
    return out


async def _watch_cd(admin: AsyncClient, name: str, seen: list[str]) -> None:
    """Record the CD's overall status, then every change of it, until cancelled: a watch
    from the version read, so no change in between is missed, however brief."""
    obj = await admin.get(computedomain.ComputeDomainResource, name, namespace="default")
    version = obj.metadata.resourceVersion  # type: ignore[union-attr]
    seen.append(str((obj.to_dict().get("status") or {}).get("status")))  # type: ignore[no-untyped-call]
    watch = admin.watch(
        computedomain.ComputeDomainResource,
        namespace="default",
        fields={"metadata.name": name},
        resource_version=version,
    )
    async for _, changed in watch:
        status = str((changed.to_dict().get("status") or {}).get("status"))  # type: ignore[no-untyped-call]
        if seen[-1] != status:
            seen.append(status)


async def _daemons(admin: AsyncClient) -> dict[str, Any]:
    """The domain's daemon pods: name → (uid, restarts)."""
    uid = (await _cd(admin, WORKLOAD))["metadata"]["uid"]
    pods = await helpers.daemon_pods(admin, uid)
    out: dict[str, Any] = {}
    for p in pods:
        assert p.metadata is not None and p.status is not None
        restarts = [c.restartCount for c in p.status.containerStatuses or []]
        out[str(p.metadata.name)] = (p.metadata.uid, restarts)
    return out


async def _new_leader(admin: AsyncClient, seen: list[Any]) -> bool:
    """A pod of the current controller ReplicaSet leads and has finished a reconcile (of the
    CD: the only UID there is), so the CD's status is what the new leader computes (what was
    seen last goes to ``seen``)."""
    leader = await helpers.controller_leader(admin)
    pods = [
        p
        async for p in admin.list(
            Pod, namespace=DRIVER_NS, labels={"app.kubernetes.io/component": "controller"}
        )
    ]
    current = set()
    for p in pods:
        assert p.metadata is not None
        if not p.metadata.deletionTimestamp and helpers.ready(p):
            current.add(str(p.metadata.name))
    name = str(leader.metadata.name) if leader is not None else None  # type: ignore[union-attr]
    done = await helpers.reconciles(leader) if leader is not None else 0
    seen[:] = [name, done, sorted(current), sorted(str(p.metadata.name) for p in pods)]  # type: ignore[union-attr]
    return name in current and len(current) == 2 and done >= 1


async def _switch_keeps_workload(
    admin: AsyncClient, sim: state.SimPaths, chart: Path, cdctl: str, image_tag: str
) -> None:
    """``helm upgrade`` to ``chart`` under the running workload; neither it nor its IMEX
    domain may notice: the controller never updates a DaemonSet it created, so the domain's
    daemons keep the version they were formed with, and the CD stays Ready throughout."""
    before = await _held(admin, sim)
    assert all(e["checkpoint"] == "PrepareCompleted" and e["cdi"] for e in before.values()), before
    daemons, daemon_cdctl = await _daemons(admin), _cdctl_processes(sim, "daemon")
    seen: list[str] = []
    watcher = asyncio.create_task(_watch_cd(admin, WORKLOAD, seen))

    async def watching() -> bool:
        return bool(seen)

    await helpers.within(10, watching, "the CD status watch started")
    t0 = time.monotonic()
    try:
        await _install(sim, chart)
        print(f"helm upgrade to {chart}: {time.monotonic() - t0:.1f}s")
        await _runs(sim, cdctl, {"controller": 2, "plugin": 2}, timeout=120)
        lease: list[Any] = []
        try:
            await helpers.within(
                60, lambda: _new_leader(admin, lease), "a new controller pod leads, reconciled"
            )
        except AssertionError as err:
            raise AssertionError(
                f"{err}; leader, its reconciles, ready pods, all pods: {lease}"
            ) from err
        print(f"controller and plugin switched, new leader: {time.monotonic() - t0:.1f}s")
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    print(f"CD status during the switch: {' -> '.join(seen)}")
    assert seen == ["Ready"], f"the CD did not stay Ready: {seen}"
    assert await _daemons(admin) == daemons, "the domain's daemons were replaced"
    assert _cdctl_processes(sim, "daemon") == daemon_cdctl
    after = await _held(admin, sim)
    assert after == before, f"the workload changed under the switch:\n{before}\n{after}"
    for pod in await _workloads(admin):
        name = str(pod.metadata.name)  # type: ignore[union-attr]
        log = "".join([line async for line in admin.log(name, namespace="default")])
        assert log.count("mnnvl-workload: OK") == 1 and "stopping" not in log, log
    controller = [
        p
        async for p in admin.list(
            Pod, namespace=DRIVER_NS, labels={"app.kubernetes.io/component": "controller"}
        )
    ]
    assert {c.image for p in controller for c in p.spec.containers} == {  # type: ignore[union-attr]
        f"ghcr.io/compute-domains/compute-domains:{image_tag}"
    }


async def _nothing_left(admin: AsyncClient, sim: state.SimPaths) -> bool:
    left: list[Any] = await helpers.daemon_pods(admin, None)
    left += [c async for c in admin.list(clique.ComputeDomainCliqueResource, namespace=DRIVER_NS)]
    left += [
        d
        async for d in admin.list(
            DaemonSet, namespace=DRIVER_NS, labels={names.COMPUTE_DOMAIN_LABEL: None}
        )
    ]
    left += await helpers.marked_nodes(admin)
    left += [c async for c in admin.list(ResourceClaim, namespace="*")]
    left += [
        t
        async for t in admin.list(
            ResourceClaimTemplate, namespace="*", labels={names.COMPUTE_DOMAIN_LABEL: None}
        )
    ]
    left += [c async for c in admin.list(computedomain.ComputeDomainResource, namespace="*")]
    files = [f for n in NODES for f in (sim.node_root(n) / "var/run/cdi").glob("*claim*")]
    return not left and not files


async def _delete_workload(admin: AsyncClient, sim: state.SimPaths, limit: float) -> None:
    """Delete the workload (pods gone within ``limit``), then its CD; nothing may be left."""
    t0 = time.monotonic()
    await asyncio.wait_for(
        asyncio.to_thread(
            helpers.kubectl, sim, "delete", "deployment", WORKLOAD, "-n", "default", "--wait=true"
        ),
        80,
    )

    async def pods_gone() -> bool:
        return not await _workloads(admin)

    await helpers.within(limit - (time.monotonic() - t0), pods_gone, "workload pods gone")
    print(f"workload pods gone {time.monotonic() - t0:.1f}s after the delete")
    await asyncio.to_thread(
        helpers.kubectl, sim, "delete", "computedomain", WORKLOAD, "-n", "default", "--wait=true"
    )
    await helpers.within(
        120, lambda: _nothing_left(admin, sim), "no CD, daemon, clique, label, claim"
    )


async def _a1_cycle(admin: AsyncClient, sim: state.SimPaths, cdctl: str) -> None:
    """Upstream A1 on a fresh CD: pod Ready <= 100 s with channel0, gone <= 10 s, CD deleted;
    the fresh CD's daemon runs the installed version (``cdctl``)."""
    await admin.create(
        computedomain.ComputeDomainResource(
            metadata=ObjectMeta(name=A1, namespace="default"),
            spec={"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}}},
        )
    )
    await admin.create(helpers.channel_pod(A1, "imex-channel-0"))

    async def pod_ready() -> bool:
        return helpers.ready(await admin.get(Pod, A1, namespace="default"))

    took = await helpers.within(100, pod_ready, "A1: pod Ready")
    print(f"A1 pod Ready in {took:.1f}s")
    assert "channel0" in await _follow_log(admin, A1, "channel0", timeout=30)
    await helpers.within(60, lambda: _cd_ready(admin, A1, 1), "A1: CD Ready with its node")
    await _runs(sim, cdctl, {"daemon": 1}, timeout=60)
    await admin.delete(Pod, A1, namespace="default")

    async def pod_gone() -> bool:
        try:
            await admin.get(Pod, A1, namespace="default")
        except ApiError as err:
            return err.status.code == 404
        return False

    await helpers.within(10, pod_gone, "A1: pod gone")
    await admin.delete(computedomain.ComputeDomainResource, A1, namespace="default")
    await helpers.within(120, lambda: _nothing_left(admin, sim), "A1: nothing left")


def test_release_runs_its_own_code(release: releases.Release) -> None:
    """The release venv is the previous release's code, not this checkout's (what the checks
    above rely on)."""
    out = subprocess.run(
        [str(release.bin_dir / "cdctl"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert out.stdout.strip() == f"cdctl, version {release.version}"
    assert release.version != compute_domains.__version__


async def test_h1_downgrade_current_to_last_stable(
    admin: AsyncClient, rack_sim: state.SimPaths, release: releases.Release
) -> None:
    await _install(rack_sim, options.chart_dir())
    await _runs(rack_sim, CHECKOUT_CDCTL, {"controller": 2, "plugin": 2}, timeout=120)
    await _start_workload(admin)
    await _runs(rack_sim, CHECKOUT_CDCTL, {"daemon": 2}, timeout=60)

    # Downgrade; the CRDs stay at the current version (helm never touches crds/ on upgrade).
    release_cdctl = str(release.bin_dir / "cdctl")
    await _switch_keeps_workload(admin, rack_sim, release.chart, release_cdctl, release.version)

    await _delete_workload(admin, rack_sim, limit=10)
    await _a1_cycle(admin, rack_sim, release_cdctl)


async def test_h2_upgrade_last_stable_to_current(
    admin: AsyncClient, rack_sim: state.SimPaths, release: releases.Release
) -> None:
    # 1-2: wipe state: uninstall, plugin folders, CRDs.
    t0 = time.monotonic()
    await asyncio.to_thread(
        helpers.helm,
        rack_sim,
        "uninstall",
        driver.RELEASE,
        "-n",
        DRIVER_NS,
        "--wait",
        "--timeout=30s",
    )

    async def driver_gone() -> bool:
        return not [
            p
            async for p in admin.list(
                Pod, namespace=DRIVER_NS, labels={"app.kubernetes.io/instance": driver.RELEASE}
            )
        ]

    await helpers.within(10, driver_gone, "H2: driver pods gone after helm uninstall")
    print(f"helm uninstall, driver pods gone: {time.monotonic() - t0:.1f}s")
    for node in NODES:
        shutil.rmtree(rack_sim.node_root(node) / PLUGIN_DIR, ignore_errors=True)
    t0 = time.monotonic()
    for crd in CRDS:
        await admin.delete(CustomResourceDefinition, crd)

    async def crds_gone() -> bool:
        names_left = {c.metadata.name async for c in admin.list(CustomResourceDefinition)}  # type: ignore[union-attr]
        return not names_left & set(CRDS)

    await helpers.within(10, crds_gone, "H2: CRDs deleted")

    # 3-4: the previous release with its own CRDs, and the workload on it.
    await _install(rack_sim, release.chart)
    release_cdctl = str(release.bin_dir / "cdctl")
    await _runs(rack_sim, release_cdctl, {"controller": 2, "plugin": 2}, timeout=120)
    await _start_workload(admin)
    await _runs(rack_sim, release_cdctl, {"daemon": 2}, timeout=60)

    # 5: the explicit CRD upgrade step; 6: the chart upgrade.
    out = await asyncio.to_thread(
        helpers.kubectl,
        rack_sim,
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        str(options.chart_dir() / "crds"),
    )
    assert all(crd in out for crd in CRDS), out
    await _switch_keeps_workload(
        admin, rack_sim, options.chart_dir(), CHECKOUT_CDCTL, compute_domains.__version__
    )

    # 7-8: the old workload is deletable within H2's 60 s; then a fresh A1 cycle.
    await _delete_workload(admin, rack_sim, limit=60)
    await _a1_cycle(admin, rack_sim, CHECKOUT_CDCTL)
