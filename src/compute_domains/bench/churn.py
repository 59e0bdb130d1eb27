"""``cdctl bench churn``: create and delete ComputeDomains in parallel lanes, check every cycle.

Upstream shook out index swaps and stale status by running 36+ create/delete cycles. Here each
lane (its own namespace) repeats: create a CD and a workload of ``n`` pods, wait until it is
formed (the ``observe.Observer`` milestones), check the formed state, delete both, wait until
nothing is left, and check that nothing was leaked. A failed check is recorded with what was
wrong and the lane goes on with its next cycle, so one soak reports every kind of failure.

Checks while formed: ``status.nodes`` has ``n`` distinct nodes, all Ready; ``(cliqueID, index)``
pairs are unique and every index is below the per-clique maximum; each node carries this CD's
label; the clique objects list the same nodes and indices as the status. Checks after teardown:
no daemon pod, workload pod, clique, node label, claim or ComputeDomain left (``leftovers``), and
on every simulated node no CDI spec file and no prepared checkpoint entry of this cycle's claims,
and no per-CD folder (``domains/<cdUID>``, the IMEX config) of this cycle's CD.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import clique, computedomain, nodemark
from compute_domains.bench import observe

MAX_PER_CLIQUE = 18
"""The per-clique index bound the chart configures (``MAX_NODES_PER_IMEX_DOMAIN``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cycle:
    """One create → formed → delete → gone cycle of one lane."""

    lane: int
    cycle: int
    formation_s: float
    """Apply → workload pods Ready and the CD Ready with ``n`` nodes (None-free: failed = inf)."""
    teardown_s: float
    problems: list[str]


def _formed_problems(
    cd: dict[str, Any], cliques: list[dict[str, Any]], labels: dict[str, str], n: int, uid: str
) -> list[str]:
    """What is wrong with a formed domain (pure: the objects are passed in)."""
    problems: list[str] = []
    nodes = (cd.get("status") or {}).get("nodes") or []
    node_names = [e.get("name") for e in nodes]
    if len(nodes) != n or len(set(node_names)) != n:
        problems.append(
            f"status.nodes has {len(nodes)} entries for {len(set(node_names))} nodes, want {n}"
        )
    if any(e.get("status") != "Ready" for e in nodes):
        problems.append("status.nodes has NotReady entries while formed")
    slots = [(e.get("cliqueID"), e.get("index")) for e in nodes]
    if len(set(slots)) != len(slots):
        problems.append(f"duplicate (cliqueID, index) in status: {sorted(map(str, slots))}")
    if any(not isinstance(i, int) or not 0 <= i < MAX_PER_CLIQUE for _, i in slots):
        problems.append(f"index outside [0, {MAX_PER_CLIQUE}) in status")
    for node in node_names:
        if labels.get(str(node)) != uid:
            problems.append(f"node {node} lacks the CD label (has {labels.get(str(node))!r})")
    in_cliques = sorted(
        (str(d.get("cliqueID")), d.get("nodeName"), d.get("index"))
        for c in cliques
        for d in c.get("daemons") or []
    )
    in_status = sorted((str(e.get("cliqueID")), e.get("name"), e.get("index")) for e in nodes)
    if in_cliques != in_status:
        problems.append(f"cliques {in_cliques} disagree with status {in_status}")
    return problems


def _file_problems(roots: list[Path], claim_uids: set[str], domain_uid: str) -> list[str]:
    """CDI spec files or prepared checkpoint entries of ``claim_uids``, or the folder of CD
    ``domain_uid``, left on any node."""
    problems: list[str] = []
    for root in roots:
        for folder in (root / "var/lib/kubelet/plugins").glob(f"*/domains/{domain_uid}"):
            problems.append(f"folder {folder.parent.name}/{domain_uid} left on {root.name}")
        for uid in claim_uids:
            for spec in (root / "var/run/cdi").glob(f"*claim_{uid}*"):
                problems.append(f"CDI spec {spec.name} left on {root.name}")
        for path in (root / "var/lib/kubelet/plugins").glob("*/checkpoint.json"):
            try:
                claims = json.loads(path.read_text()).get("claims") or {}
            except (OSError, ValueError):
                continue  # being rewritten (atomic rename) or quarantined: not a leak
            for uid in claim_uids & set(claims):
                state = (claims[uid] or {}).get("state")
                if state != "UnprepareCompleted":  # a tombstone is kept on purpose
                    problems.append(f"checkpoint on {root.name} still holds claim {uid} ({state})")
    return problems


async def _claim_uids(
    client: AsyncClient, ns: str, name: str, driver_ns: str, uid: str
) -> set[str]:
    """UIDs of the workload's claims and of this CD's daemon claims."""
    daemon_prefix = f"computedomain-daemon-{uid}"
    out: set[str] = set()
    async for c in client.list(ResourceClaim, namespace=ns):
        if str(c.metadata.name).startswith(f"{name}-"):  # type: ignore[union-attr]
            out.add(str(c.metadata.uid))  # type: ignore[union-attr]
    async for c in client.list(ResourceClaim, namespace=driver_ns):
        if str(c.metadata.name).startswith(daemon_prefix):  # type: ignore[union-attr]
            out.add(str(c.metadata.uid))  # type: ignore[union-attr]
    return out


async def one_cycle(
    client: AsyncClient,
    *,
    lane: int,
    cycle: int,
    n: int,
    ns: str,
    driver_ns: str,
    node_roots: Callable[[], list[Path]],
    timeout: float = 600,
) -> Cycle:
    """Run one cycle in namespace ``ns``; never raises for a failed check (it is recorded)."""
    name = f"churn-{lane}-{cycle}"
    problems: list[str] = []
    made, observer, waiting = await observe.apply(
        client, n, ns=ns, driver_ns=driver_ns, name=name, timeout=timeout
    )
    assert made is not None  # the claims workload (the default) always has its CD
    uid = made
    formation = float("inf")
    claim_uids: set[str] = set()
    try:
        await waiting
        formation = max(observer.marks["workloads"], observer.marks["cd"])
        cd = (await client.get(computedomain.ComputeDomainResource, name, namespace=ns)).to_dict()  # type: ignore[no-untyped-call]
        cliques = [
            c.to_dict()  # type: ignore[no-untyped-call]
            async for c in client.list(clique.ComputeDomainCliqueResource, namespace=driver_ns)
            if str(c.metadata.name).startswith(uid)  # type: ignore[union-attr]
        ]
        labels = {
            str(x.metadata.name): nodemark.domain_of(x.metadata)  # type: ignore[union-attr]
            async for x in client.list(Node)
        }
        problems += _formed_problems(cd, cliques, labels, n, uid)
        claim_uids = await _claim_uids(client, ns, name, driver_ns, uid)
    except TimeoutError as err:
        problems.append(str(err))
    teardown = float("inf")
    try:
        teardown = await observe.delete_and_wait(
            client, uid=uid, ns=ns, name=name, driver_ns=driver_ns, timeout=timeout
        )
    except TimeoutError:
        left = await observe.leftovers(client, uid=uid, ns=ns, name=name, driver_ns=driver_ns)
        problems.append(f"not torn down in {timeout:.0f}s: {left}")
    problems += await asyncio.to_thread(_file_problems, node_roots(), claim_uids, uid)
    return Cycle(
        lane=lane, cycle=cycle, formation_s=formation, teardown_s=teardown, problems=problems
    )


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank; inf when empty."""
    finite = sorted(v for v in values if v != float("inf"))
    if not finite:
        return float("inf")
    rank = min(len(finite) - 1, max(0, math.ceil(q * len(finite)) - 1))
    return finite[rank]


def summarize(cycles: list[Cycle]) -> dict[str, Any]:
    """Cycles, failures, p50/p99 formation and teardown, and every problem seen."""
    formations = [c.formation_s for c in cycles]
    teardowns = [c.teardown_s for c in cycles]
    failed = [c for c in cycles if c.problems]
    return {
        "cycles": len(cycles),
        "failed": len(failed),
        "formation_p50_s": percentile(formations, 0.5),
        "formation_p99_s": percentile(formations, 0.99),
        "formation_median_s": statistics.median(formations) if formations else float("inf"),
        "teardown_p50_s": percentile(teardowns, 0.5),
        "teardown_p99_s": percentile(teardowns, 0.99),
        "problems": [f"lane {c.lane} cycle {c.cycle}: {p}" for c in failed for p in c.problems],
    }
