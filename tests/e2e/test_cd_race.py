"""Two (and three) ComputeDomains applied together onto one rack: no pod hangs (issue 29).

The race: the scheduler sees that a node is held only once its plugin republished the slice
(holder attribute ``domain``), after the first claim's prepare began; claims of two CDs
allocated on one free node before that both land there, and the loser's prepare is refused.
Here the race is forced, deterministically: the plugins run with the fault drill's
``kubeletPlugin.holderPublishDelaySeconds`` (the slice shows a new holder only after
``DELAY`` s), every job prefers the nodes in the same order (n00, then n01, ...), and the
replicas are added in rounds, one pod per CD per round, so every round puts pods of different
CDs onto the same free node within the delay. Whoever's prepare comes first holds each node:
either one CD wins both contested nodes (the other waited for it for good before the fix) or
each wins one (each waited for the other: a deadlock).

Shown: every pod ends Running with its channel, on a node its own CD holds; every CD Ready;
each loser was re-placed (``PodReplaced`` Warning on it and its CD, naming the holder) within
``DELAY`` plus a few seconds of being bound; and the rounds did contest a node (else the test
proved nothing). After the three-CD race, one more job runs on a free node, or is Pending with
the scheduler's reason only while every node is held. Two pods without a controller racing
for one node: the loser cannot move, so it waits, with a ``NodeHeldByAnotherComputeDomain``
Warning and its CD's status naming the holder, and starts once the holder's pod is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Node, Pod

from compute_domains.api import computedomain, names, nodemark
from compute_domains.sim import state, topology
from tests.e2e import helpers

pytestmark = [pytest.mark.timeout(900)]
if helpers.per_clique():
    pytestmark.append(
        pytest.mark.skip(
            reason="per-clique scope: several CDs share a node, each behind its own channel "
            "(decision 0015), so no node is held by one CD and there is no holder race to lose"
        )
    )
SHAPE = topology.Shape(racks=1, nodes_per_rack=4)
NODES = tuple(f"gb200-r0-n{i:02d}" for i in range(4))
DELAY = 4.0
"""Seconds the plugins wait before a new holder reaches their slice (the forced race window)."""
REPLACED_WITHIN = DELAY + 8.0
"""Longest time from a loser's binding to its eviction: the delay, the winner's prepare up to
its node label, and the controller's pass."""


@pytest.fixture(scope="module")
def drill(rack_sim: state.SimPaths) -> Iterator[state.SimPaths]:
    helpers.upgrade(rack_sim, f"kubeletPlugin.holderPublishDelaySeconds={DELAY:g}")
    yield rack_sim


def _deployment(name: str, template: str, replicas: int) -> Deployment:
    """A job of ``replicas`` 2-GPU pods with a channel claim each, preferring n00 > n01 > ..."""
    spec = helpers.channel_pod(name, template, gpus=2).to_dict()["spec"]
    prefs = [
        {
            "weight": 100 - 30 * i,
            "preference": {
                "matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                ]
            },
        }
        for i, node in enumerate(NODES[:3])
    ]
    spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefs}}
    labels = {"job": name}
    return cast(
        Deployment,
        Deployment.from_dict(
            {
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": spec},
                },
            }
        ),
    )


class _Watcher:
    """Follows the jobs' pods: when each was first seen bound, and first seen deleted."""

    def __init__(self, admin: AsyncClient, jobs: list[str]) -> None:
        self.admin = admin
        self.jobs = jobs
        self.bound: dict[str, tuple[float, str, str]] = {}
        """pod UID -> (time first seen bound, job, node)."""
        self.deleted: dict[str, float] = {}

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            seen = set()
            async for p in self.admin.list(Pod, namespace="default"):
                meta, spec = p.metadata, p.spec
                job = (meta.labels or {}).get("job") if meta else None
                if meta is None or spec is None or job not in self.jobs or not spec.nodeName:
                    continue
                uid = str(meta.uid)
                seen.add(uid)
                self.bound.setdefault(uid, (now, job, spec.nodeName))
                if meta.deletionTimestamp is not None:
                    self.deleted.setdefault(uid, now)
            for uid in set(self.bound) - seen:  # gone between two looks
                self.deleted.setdefault(uid, now)
            await asyncio.sleep(0.2)

    def contested(self) -> dict[str, set[str]]:
        """node -> jobs whose pods were bound to it (two or more: contested)."""
        out: dict[str, set[str]] = {}
        for _t, job, node in self.bound.values():
            out.setdefault(node, set()).add(job)
        return {n: jobs for n, jobs in out.items() if len(jobs) > 1}


@contextlib.asynccontextmanager
async def _watching(admin: AsyncClient, jobs: list[str]) -> AsyncIterator[_Watcher]:
    watcher = _Watcher(admin, jobs)
    task = asyncio.create_task(watcher.run())
    try:
        yield watcher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _pods(admin: AsyncClient, job: str) -> list[Pod]:
    return [
        p
        async for p in admin.list(Pod, namespace="default", labels={"job": job})
        if p.metadata is not None and p.metadata.deletionTimestamp is None
    ]


async def _labels(admin: AsyncClient) -> dict[str, str]:
    return {
        str(n.metadata.name): nodemark.domain_of(n.metadata)  # the label, or the annotation
        async for n in admin.list(Node, labels={names.GPU_PRESENT_LABEL: "true"})
    }


async def _all_free(admin: AsyncClient) -> bool:
    """Every node free by its mark and in the slices the scheduler reads."""
    marks = set((await _labels(admin)).values())
    return marks == {""} and not any((await helpers.slice_holders(admin)).values())


async def _replaced_events(admin: AsyncClient, kind: str) -> list[Event]:
    return [
        e
        async for e in admin.list(Event, namespace="default")
        if e.reason == "PodReplaced" and e.involvedObject.kind == kind
    ]


async def _race(admin: AsyncClient, jobs: list[str]) -> dict[str, Any]:
    """Apply ``jobs`` (a CD and a 2-replica job each) in rounds; return what was seen."""
    uids = {job: await helpers.create_cd(admin, job) for job in jobs}
    async with _watching(admin, jobs) as watcher:
        for job in jobs:
            await admin.create(_deployment(job, f"{job}-rct", 1))
        for job in jobs:

            async def one_bound(job: str = job) -> bool:
                return any(p.spec and p.spec.nodeName for p in await _pods(admin, job))

            await helpers.within(60, one_bound, f"{job}'s first pod bound")
        for job in jobs:  # the second round, still inside the first round's delay
            await admin.patch(Deployment, job, {"spec": {"replicas": 2}}, namespace="default")

        async def settled() -> bool:
            for job in jobs:
                pods = await _pods(admin, job)
                if len(pods) != 2 or not all(helpers.ready(p) for p in pods):
                    return False
                if (await helpers.cd_status(admin, job)).get("status") != "Ready":
                    return False
            return True

        took = await helpers.within(180, settled, "every pod Running and every CD Ready")
    return {"uids": uids, "watcher": watcher, "took": took}


async def _check(admin: AsyncClient, jobs: list[str], seen: dict[str, Any]) -> None:
    uids, watcher = seen["uids"], seen["watcher"]
    contested = watcher.contested()
    assert contested, f"no node was contested: the race was not forced ({watcher.bound})"
    labels = await _labels(admin)
    for job in jobs:
        for p in await _pods(admin, job):
            node = str(p.spec.nodeName)  # type: ignore[union-attr]
            assert labels[node] == uids[job], f"{job}'s pod on {node}, held by {labels[node]}"
            await helpers.log_with(admin, str(p.metadata.name), ("channel0",))  # type: ignore[union-attr]
    losers = {uid: watcher.bound[uid] for uid in watcher.deleted}
    assert losers, "a node was contested but nobody was re-placed"
    waits = {uid: watcher.deleted[uid] - watcher.bound[uid][0] for uid in losers}
    print(f"contested nodes {contested}; re-placed after {sorted(waits.values())} s; "
          f"all Running after {seen['took']:.1f} s")  # fmt: skip
    assert max(waits.values()) <= REPLACED_WITHIN, waits
    on_pods = [
        e for e in await _replaced_events(admin, "Pod") if e.involvedObject.uid in watcher.bound
    ]
    assert {str(e.involvedObject.uid) for e in on_pods} == set(losers), on_pods
    by_name = {uid: name for name, uid in uids.items()}
    for event in on_pods:
        message = str(event.message)
        assert "is held by ComputeDomain default/" in message, message
        assert "re-placed so the scheduler can choose a free node" in message, message
    on_cds = [
        e
        for e in await _replaced_events(admin, names.COMPUTE_DOMAIN_KIND)
        if e.involvedObject.uid in by_name
    ]
    assert {by_name[str(e.involvedObject.uid)] for e in on_cds} == {
        j for _t, j, _n in losers.values()
    }


async def _cleanup(admin: AsyncClient, jobs: list[str]) -> None:
    for job in jobs:
        await admin.delete(Deployment, job, namespace="default")
    for job in jobs:

        async def gone(job: str = job) -> bool:
            return not [p async for p in admin.list(Pod, namespace="default", labels={"job": job})]

        await helpers.within(60, gone, f"{job}'s pods gone")
        await admin.delete(computedomain.ComputeDomainResource, job, namespace="default")

    async def free() -> bool:
        for job in jobs:
            if not await helpers.gone(admin, computedomain.ComputeDomainResource, job):
                return False
        return await _all_free(admin)

    await helpers.within(120, free, "every CD gone and every node free again, slices too")


async def test_two_cds_applied_together(admin: AsyncClient, drill: state.SimPaths) -> None:
    """A and B, two 2-GPU pods each, race for n00 and n01: both end Running, none hangs."""
    jobs = ["race-a", "race-b"]
    seen = await _race(admin, jobs)
    await _check(admin, jobs, seen)
    await _cleanup(admin, jobs)


async def test_three_cds_applied_together(admin: AsyncClient, drill: state.SimPaths) -> None:
    """A, B and C race for n00, n01 and n02 (a three-way cycle is possible): all end Running."""
    jobs = ["race3-a", "race3-b", "race3-c"]
    seen = await _race(admin, jobs)
    await _check(admin, jobs, seen)
    # One more job: it runs on a node still free, or, when the three hold all four (a re-placed
    # pod may have taken a node of its own), it is Pending with the scheduler's reason.
    await helpers.create_cd(admin, "race3-late")
    await admin.create(_deployment("race3-late", "race3-late-rct", 1))
    outcome = ""

    async def placed_or_refused() -> bool:
        nonlocal outcome
        for p in await _pods(admin, "race3-late"):
            if helpers.ready(p):
                outcome = "running"
            conds = (p.status.conditions or []) if p.status else []
            refused = [c for c in conds if c.type == "PodScheduled" and c.status == "False"]
            if refused and "nodes are available" in str(refused[0].message):
                outcome = f"pending: {refused[0].message}"
        return bool(outcome)

    await helpers.within(120, placed_or_refused, "the late job Running or refused by the scheduler")
    held = {v for v in (await _labels(admin)).values() if v}
    print(f"late job: {outcome}; nodes held by {len(held)} CDs")
    if outcome.startswith("pending"):
        assert "" not in (await _labels(admin)).values(), f"{outcome} while a node is free"
    await _cleanup(admin, [*jobs, "race3-late"])


def _bare_pod(name: str, template: str) -> Pod:
    """A pod without a controller (2 GPUs, a channel claim), preferring n00 like the jobs."""
    spec = _deployment(name, template, 1).to_dict()["spec"]["template"]["spec"]
    return cast(
        Pod, Pod.from_dict({"metadata": {"name": name, "namespace": "default"}, "spec": spec})
    )


async def test_ownerless_pods_race_and_the_loser_waits_saying_why(
    admin: AsyncClient, drill: state.SimPaths
) -> None:
    """Two bare pods of two CDs race for n00: the loser cannot be moved, so it waits, with a
    Warning naming the holder on the pod and its CD and in its CD's status; it starts once the
    holder's pod is gone."""
    # Both pods must find n00 free in the slices (an earlier test's holder lingers there up to
    # DELAY s after its mark went), else the first goes elsewhere and nothing races.
    await helpers.within(60, lambda: _all_free(admin), "every node free, slices too")
    uids = {cd: await helpers.create_cd(admin, cd) for cd in ("lone-a", "lone-b")}
    for cd in uids:
        await admin.create(_bare_pod(cd, f"{cd}-rct"))

    async def both_bound() -> dict[str, str]:
        out = {}
        for cd in uids:
            p = await admin.get(Pod, cd, namespace="default")
            if p.spec and p.spec.nodeName:
                out[cd] = p.spec.nodeName
        return out if len(out) == 2 else {}

    bound: dict[str, str] = {}

    async def bound_now() -> bool:
        nonlocal bound
        bound = await both_bound()
        return bool(bound)

    await helpers.within(60, bound_now, "both bare pods bound")
    assert bound["lone-a"] == bound["lone-b"], f"the race was not forced: {bound}"
    node = bound["lone-a"]
    holder: dict[str, str] = {}

    async def held() -> bool:
        value = (await _labels(admin))[node]
        holder.update({cd: uid for cd, uid in uids.items() if uid == value})
        return bool(holder)

    await helpers.within(60, held, f"{node} held by one of the two")
    (winner,) = holder
    (loser,) = set(uids) - {winner}
    found: list[Event] = []

    async def warned() -> bool:
        found[:] = [
            e
            async for e in admin.list(Event, namespace="default")
            if e.reason == "NodeHeldByAnotherComputeDomain" and e.involvedObject.name == loser
        ]
        return bool(found)

    await helpers.within(60, warned, f"a NodeHeldByAnotherComputeDomain Event on {loser}")
    message = str(found[0].message)
    assert f"node {node} is held by ComputeDomain default/{winner}" in message, message
    assert "no controller to recreate it" in message, message
    await helpers.within(100, lambda: helpers.pod_ready(admin, winner), f"{winner} Running")
    p = await admin.get(Pod, loser, namespace="default")
    assert not helpers.ready(p) and p.metadata is not None and not p.metadata.deletionTimestamp

    async def status_names_it() -> bool:
        ready = [
            c
            for c in (await helpers.cd_status(admin, loser)).get("conditions") or []
            if c["type"] == "Ready"
        ]
        text = ready[0]["message"] if ready else ""
        return f"held by ComputeDomain default/{winner}" in text and f"default/{loser}" in text

    await helpers.within(30, status_names_it, f"{loser}'s status names the holder and the pod")
    # The holder leaves: the waiting pod starts there.
    await admin.delete(Pod, winner, namespace="default")
    await helpers.within(120, lambda: helpers.pod_ready(admin, loser), f"{loser} Running")
    await admin.delete(Pod, loser, namespace="default")
    for cd in uids:
        await helpers.within(60, lambda cd=cd: helpers.gone(admin, Pod, cd), f"{cd} gone")
        await admin.delete(computedomain.ComputeDomainResource, cd, namespace="default")
