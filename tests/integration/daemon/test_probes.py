"""The daemon answers its own probes, and says how long each start-up step took.

A daemon pod made as the DaemonSet makes it (``httpGet /readyz`` probes, no exec) on a simulated
node whose IMEX is wedged from the start (the simulator's ``hang`` fault: the command service
reads requests and never answers). ``/readyz`` is the result of the daemon's own IMEX check: not
Ready while IMEX gives no ``READY``, Ready once it does, and NotReady again (the pod and its
clique entry) when IMEX stops answering. Its ``/metrics`` and its log carry the start-up steps.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import uuid
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
import pytest
from lightkube import AsyncClient
from lightkube.models.core_v1 import (
    Container,
    EnvVar,
    HostPathVolumeSource,
    Volume,
    VolumeMount,
)
from lightkube.resources.core_v1 import Pod

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import imexconfig, steps
from compute_domains.sim import state
from tests.integration.daemon import pods
from tests.integration.daemon.conftest import StartController
from tests.integration.daemon.pods import NODES
from tests.integration.helpers import wait_for

pytestmark = pytest.mark.integration

NODE = NODES[1]
POD = "daemon-probed"


def _wedged_daemon(ns: str, cd: Any, clique_id: str, faults: str, owner: Any) -> Pod:
    """A daemon pod whose IMEX reads its fault flags from the node folder ``faults``."""
    template = imexconfig.DEFAULT_TEMPLATE + "SIM_FAULT_DIR=/faults\n"
    init = Container(
        name="faulty-template",
        image=pods.IMAGE,
        command=["sh", "-c", 'printf "%s" "$TEMPLATE" > /imexd/imexd.cfg.tmpl'],
        env=[EnvVar(name="TEMPLATE", value=template)],
        volumeMounts=[VolumeMount(name="imexd", mountPath="/imexd")],
    )
    pod = pods.daemon_pod(
        POD, NODE, ns=ns, cd=cd, clique_id=clique_id, max_nodes=1, owner=owner, init=[init]
    )
    assert pod.spec is not None and pod.spec.volumes is not None
    pod.spec.volumes.append(
        Volume(name="faults", hostPath=HostPathVolumeSource(path=faults, type="Directory"))
    )
    mounts = pod.spec.containers[0].volumeMounts
    assert mounts is not None
    mounts.append(VolumeMount(name="faults", mountPath="/faults"))
    assert pod.spec.containers[0].readinessProbe.httpGet is not None  # type: ignore[union-attr]
    return pod


async def _get(ip: str, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.get(f"http://{ip}:{pods.METRICS_PORT}{path}")


def _metric(text: str, series: str) -> float | None:
    m = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


async def _until_metric(ip: str, series: str, ok: Callable[[float], bool]) -> str:
    """``/metrics`` once ``series`` satisfies ``ok`` (re-read every half second)."""
    async with asyncio.timeout(90):
        while True:
            try:
                text = (await _get(ip, "/metrics")).text
            except httpx.HTTPError:
                text = ""  # not serving yet
            value = _metric(text, series)
            if value is not None and ok(value):
                return text
            await asyncio.sleep(0.5)


def _sighup_imex() -> None:
    """IMEX re-reads its fault flags on SIGHUP."""
    pids = pods.imex_pids(POD)
    assert pids, "no nvidia-imex of the daemon runs"
    for pid in pids:
        os.kill(pid, signal.SIGHUP)


def _entry(status: Readiness) -> Callable[[ComputeDomainClique], bool]:
    def ok(clique: ComputeDomainClique) -> bool:
        entry = clique.daemon(NODE)
        return entry is not None and entry.status is status

    return ok


async def test_readyz_is_the_daemons_own_imex_check(
    admin: AsyncClient,
    daemon_sim: state.SimPaths,
    driver_ns: str,
    compute_domain: Any,
    pod_owner: Any,
    start_controller: StartController,
) -> None:
    ns, cd = driver_ns, compute_domain
    await start_controller(1)
    clique_id = await pods.node_clique(admin, NODE)
    clique = names.clique_object_name(cd.metadata.uid, clique_id)
    faults = f"/var/tmp/imex-faults-{uuid.uuid4().hex[:6]}"
    folder = daemon_sim.node_root(NODE) / faults.lstrip("/")
    folder.mkdir(parents=True)
    (folder / "hang").touch()  # IMEX never answers a command until the flag goes
    await admin.create(_wedged_daemon(ns, cd, clique_id, faults, pod_owner))
    running = await wait_for(
        admin, Pod, POD, lambda p: bool(p.status and p.status.podIP), namespace=ns, timeout=120
    )
    ip = running.status.podIP  # type: ignore[union-attr]

    # IMEX runs but gives no READY: the daemon's own check failed, so nothing says Ready.
    not_ready = 'compute_domains_daemon_imex_checks_total{result="not_ready"}'
    await _until_metric(ip, not_ready, lambda v: v >= 1)
    assert (await _get(ip, names.DAEMON_HEALTH_PATH)).status_code == 503
    assert not pods.is_ready(await admin.get(Pod, POD, namespace=ns))
    await pods.wait_clique(admin, ns, clique, _entry(Readiness.NOT_READY))

    # IMEX answers READY: the probe passes, the pod turns Ready, the entry says so.
    (folder / "hang").unlink()
    _sighup_imex()
    await pods.wait_clique(admin, ns, clique, _entry(Readiness.READY))
    await pods.wait_ready(admin, POD, ns)
    assert (await _get(ip, names.DAEMON_HEALTH_PATH)).status_code == 200
    text = await _until_metric(ip, "compute_domains_daemon_imex_ready", lambda v: v == 1)
    done = [
        _metric(text, f'compute_domains_daemon_startup_step_seconds{{step="{s}"}}')
        for s in steps.ORDER
    ]
    assert all(t is not None for t in done), text
    assert done == sorted(done), done  # in the daemon's order, each counted from its start
    log = await pods.log_of(admin, POD, ns, "compute-domain-daemon")
    assert re.search(r"step=ready_reported since_start_s=[\d.]+ since_prev_s=[\d.]+", log)

    # IMEX stops answering: the daemon's next own check fails and takes Ready away.
    (folder / "hang").touch()
    _sighup_imex()
    await pods.wait_clique(admin, ns, clique, _entry(Readiness.NOT_READY))
    assert (await _get(ip, names.DAEMON_HEALTH_PATH)).status_code == 503
    await wait_for(admin, Pod, POD, lambda p: not pods.is_ready(p), namespace=ns, timeout=60)
