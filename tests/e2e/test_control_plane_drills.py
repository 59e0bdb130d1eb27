"""Control-plane fault drills in the middle of an 18-node formation (issue 29, point 5).

The seed example (``examples/compute-domain-0.yaml``: one ComputeDomain, an 18-replica job) on
a 1 x 18 rack with the chart-installed driver, formed three times, each time with one drill
(``DRILLS``) run through ``cdctl sim control-plane`` as soon as some of its IMEX daemons have
registered in the clique and the CD is not yet Ready: the API server stopped and started again
(SIGTERM), the same as a crash (``--kill``: SIGKILL), and etcd frozen for a few seconds
(``pause etcd``). A restart breaks every watch and fails the requests in flight; a pause makes
them hang instead. Each time the domain must converge as if nothing happened:

- the CD Ready with 18 Ready entries, indices 0..17 once each, on 18 distinct nodes;
- every workload pod Running, its program seeing its channel and an UP IMEX domain;
- nothing duplicated: one DaemonSet and one daemon claim template for the CD, one clique
  object for its one clique ID, one daemon pod per node, one channel claim per workload pod
  (and one per daemon pod);
- no component died of it: no restart of the controller, a kubelet plugin or a daemon;

and deleting the job and the CD leaves nothing (``helpers.leftovers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2 as httpx
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate

from compute_domains.api import clique, computedomain, names, sharedimex
from compute_domains.cli import options
from compute_domains.sim import state
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_seed_example import sees_domain_up

pytestmark = pytest.mark.timeout(1500)
EXAMPLE = options.repo_root() / "examples" / "compute-domain-0.yaml"
CD = "compute-domain-0"
N = 18
NODES = [f"gb200-r0-n{i:02d}" for i in range(N)]
PAUSE_S = 5
AGENT_LABELS = {"app.kubernetes.io/component": "imex-agent"}
TRANSIENT = (ApiError, httpx.HTTPError, OSError)
"""What a request may raise while the API server is away: "not yet", never a verdict."""


@dataclasses.dataclass(frozen=True, slots=True)
class Formation:
    """How far the domain has come (one read of the cluster)."""

    ready: bool
    registered: int
    """Daemons registered in the CD's cliques."""
    ready_entries: int
    """Ready entries in the CD's status."""
    running: int
    """Workload pods Ready."""


async def _cd(admin: AsyncClient) -> dict[str, Any]:
    obj = await admin.get(computedomain.ComputeDomainResource, CD, namespace="default")
    doc: dict[str, Any] = obj.to_dict()  # type: ignore[no-untyped-call]
    return doc


async def _workloads(admin: AsyncClient) -> list[Pod]:
    pods = [p async for p in admin.list(Pod, namespace="default", labels={"job": "ex1"})]
    return [p for p in pods if not p.metadata.deletionTimestamp]  # type: ignore[union-attr]


async def _cliques(admin: AsyncClient, uid: str) -> list[dict[str, Any]]:
    return [
        c.to_dict()  # type: ignore[no-untyped-call]
        async for c in admin.list(
            clique.ComputeDomainCliqueResource,
            namespace=DRIVER_NS,
            labels={names.COMPUTE_DOMAIN_LABEL: uid},
        )
    ]


async def _registered(admin: AsyncClient, uid: str) -> int:
    """How many nodes joined the CD's IMEX domain: its daemons in its cliques, or in the
    per-clique scope (where the clique's shared IMEX is up before the CD) the nodes whose
    plugin gave the CD its channel there (the Node's ``compute-domains/channel.<uid>``)."""
    if helpers.per_clique():
        nodes = [n async for n in admin.list(Node)]
        return sum(1 for n in nodes if uid in sharedimex.channels(n.metadata.annotations))  # type: ignore[union-attr]
    return sum(len(c.get("daemons") or []) for c in await _cliques(admin, uid))


async def _formation(admin: AsyncClient, uid: str) -> Formation:
    status = (await _cd(admin)).get("status") or {}
    entries = status.get("nodes") or []
    return Formation(
        ready=status.get("status") == "Ready",
        registered=await _registered(admin, uid),
        ready_entries=sum(1 for e in entries if e.get("status") == "Ready"),
        running=sum(1 for p in await _workloads(admin) if helpers.ready(p)),
    )


async def _eventually(check: Callable[[], Awaitable[Any]], timeout: float, what: str) -> Any:
    """Re-check until truthy (an API server away counts as "not yet"); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
        except TRANSIENT as err:
            last = f"{type(err).__name__}: {err}"
        else:
            if last:
                return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} not reached in {timeout:.0f}s (last: {last!r})")


def _drill(sim: state.SimPaths, *args: str) -> str:
    """Run ``cdctl sim control-plane ARGS`` against the module's sim; its output."""
    res = subprocess.run(
        [sys.executable, "-m", "compute_domains", "sim", "control-plane", *args],
        env={**os.environ, "CD_SIM_HOME": str(sim.home), "CD_SIMNAME": sim.name},
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert res.returncode == 0, f"cdctl sim control-plane {args} failed:\n{res.stdout}{res.stderr}"
    return res.stdout


async def _restart_counts(admin: AsyncClient) -> dict[str, int]:
    """Driver pod (controller, plugins, daemons) → container restarts."""
    return {
        str(p.metadata.name): sum(c.restartCount for c in p.status.containerStatuses or [])  # type: ignore[union-attr]
        async for p in admin.list(Pod, namespace=DRIVER_NS)
    }


async def _assert_one_of_each(admin: AsyncClient, uid: str) -> None:
    """The formed domain holds each object once."""
    cd = await _cd(admin)
    entries = cd["status"]["nodes"]
    assert sorted(e["index"] for e in entries) == list(range(N)), entries
    assert sorted(e["name"] for e in entries) == NODES, entries
    assert all(e["status"] == "Ready" for e in entries), entries

    # Per-CD DaemonSets: one DaemonSet and one daemon claim template for the CD, one claim per
    # daemon pod. Resident agents (decision 0014): none of them; the nodes' agent pods serve.
    per_cd = not helpers.resident_agents()
    mine = {names.COMPUTE_DOMAIN_LABEL: uid}
    daemonsets = [d async for d in admin.list(DaemonSet, namespace=DRIVER_NS, labels=mine)]
    assert len(daemonsets) == int(per_cd), [d.metadata.name for d in daemonsets]  # type: ignore[union-attr]
    templates = [t async for t in admin.list(ResourceClaimTemplate, namespace="*", labels=mine)]
    assert sorted((t.metadata.namespace, t.metadata.name) for t in templates) == [  # type: ignore[union-attr]
        *([("compute-domains", f"computedomain-daemon-{uid}")] if per_cd else []),
        ("default", f"{CD}-rct"),
    ]

    # Per clique (decision 0015) the CD has no clique object and no daemon pod of its own: the
    # clique's shared registry lists every node once, on the indices of the CD's status.
    cliques = await _cliques(admin, uid)
    ids = {e["cliqueID"] for e in entries}
    if helpers.per_clique():
        assert cliques == [], [c["metadata"]["name"] for c in cliques]
        assert len(ids) == 1, ids
        shared = await admin.get(
            clique.ComputeDomainCliqueResource,
            sharedimex.registry_name(next(iter(ids))),
            namespace=DRIVER_NS,
        )
        members = shared.to_dict().get("daemons") or []  # type: ignore[no-untyped-call]
    else:
        assert len(cliques) == len(ids) == 1, [c["metadata"]["name"] for c in cliques]
        members = cliques[0].get("daemons") or []
    assert sorted(d["nodeName"] for d in members) == NODES, members
    assert sorted(d["index"] for d in members) == list(range(N)), members
    assert {d["nodeName"]: d["index"] for d in members} == {e["name"]: e["index"] for e in entries}

    daemons = await helpers.daemon_pods(admin, uid)
    serving = (
        [p async for p in admin.list(Pod, namespace=DRIVER_NS, labels=AGENT_LABELS)]
        if helpers.per_clique()
        else daemons
    )
    assert sorted(str(p.spec.nodeName) for p in serving) == NODES, [  # type: ignore[union-attr]
        (p.metadata.name, p.spec.nodeName)  # type: ignore[union-attr]
        for p in serving
    ]
    if helpers.per_clique():
        assert daemons == [], "a per-clique CD labels no pod"

    pods = await _workloads(admin)
    assert len({p.spec.nodeName for p in pods}) == len(pods) == N  # type: ignore[union-attr]
    for namespace, owners in (("default", pods), (DRIVER_NS, daemons if per_cd else [])):
        claims = [c async for c in admin.list(ResourceClaim, namespace=namespace)]
        owned = sorted(
            str(ref.name)
            for c in claims
            for ref in c.metadata.ownerReferences or []  # type: ignore[union-attr]
            if ref.kind == "Pod"
        )
        want = sorted(str(p.metadata.name) for p in owners)  # type: ignore[union-attr]
        assert len(claims) == len(owners) and owned == want, (
            namespace,
            [c.metadata.name for c in claims],
        )  # type: ignore[union-attr]


DRILLS = {
    "apiserver-stop": ("restart", "apiserver"),
    "apiserver-crash": ("restart", "apiserver", "--kill"),
    "etcd-pause": ("pause", "etcd", "--seconds", str(PAUSE_S)),
}
"""Each drill gets a formation of its own: the API server stopped (SIGTERM: it drains, then the
supervisor's grace ends it), crashed (SIGKILL: every connection reset at once), or etcd
frozen (requests hang instead of failing)."""


@pytest.mark.parametrize("drill", list(DRILLS))
async def test_a_formation_survives_a_control_plane_drill(
    admin: AsyncClient, rack_sim: state.SimPaths, drill: str
) -> None:
    assert await helpers.leftovers(admin, rack_sim, NODES) == [], "not a clean cluster"
    restarts_before = await _restart_counts(admin)
    helpers.kubectl(rack_sim, "apply", "-f", str(EXAMPLE))
    t0 = time.monotonic()
    uid = str((await _eventually(lambda: _cd(admin), 60, "the CD"))["metadata"]["uid"])

    # 1. Mid-formation: some daemons registered, the domain not Ready. The drill, at once.
    async def mid_formation() -> Formation | None:
        now = await _formation(admin, uid)
        return now if 0 < now.registered < N and not now.ready else None

    before = await _eventually(mid_formation, 600, "some daemons registered, CD not Ready")
    drill_at = time.monotonic() - t0
    out = await asyncio.to_thread(_drill, rack_sim, *DRILLS[drill])
    if drill == "etcd-pause":
        m = re.fullmatch(r"etcd continued \(SIGCONT\) after ([\d.]+)s\n", out)
        assert m and float(m[1]) >= PAUSE_S, out
    else:
        m = re.fullmatch(
            r"kube-apiserver restarted: down ([\d.]+)s \((SIG\w+), pid \d+ -> \d+\); "
            r"healthy again\n",
            out,
        )
        assert m and m[2] == ("SIGKILL" if drill == "apiserver-crash" else "SIGTERM"), out
    after = await _eventually(lambda: _formation(admin, uid), 60, "the API server answering")
    print(f"[{drill}] {drill_at:.1f}s after apply at {before}: {out.strip()}; then at {after}")

    # 2. It converges, with one of everything, and no component restarted.
    async def formed() -> bool:
        now = await _formation(admin, uid)
        return now.ready and now.ready_entries == N and now.running == N

    await _eventually(formed, 600, f"CD Ready with {N} nodes and {N} running workload pods")
    print(f"[{drill}] formed {time.monotonic() - t0:.1f}s after apply")
    await _assert_one_of_each(admin, uid)
    recorded = state.read_state(rack_sim)
    assert recorded is not None and recorded.phase == "ready", recorded  # the sim went on
    restarted = {
        pod: n
        for pod, n in (await _restart_counts(admin)).items()
        if n > restarts_before.get(pod, 0)
    }
    assert restarted == {}, f"driver pods restarted by the drills: {restarted}"
    for pod in await _workloads(admin):
        channel = await helpers.expected_channel(admin, uid, str(pod.spec.nodeName))  # type: ignore[union-attr]
        await sees_domain_up(admin, str(pod.metadata.name), channel=channel)  # type: ignore[union-attr]

    # 3. Deleting the job and the CD leaves nothing anywhere.
    helpers.kubectl(rack_sim, "delete", "-f", str(EXAMPLE), "--wait=true")
    left: list[str] = []

    async def nothing_left() -> bool:
        nonlocal left
        left = await helpers.leftovers(admin, rack_sim, NODES)
        return not left

    with contextlib.suppress(AssertionError):
        await _eventually(nothing_left, 180, "nothing left")
    assert left == [], left
