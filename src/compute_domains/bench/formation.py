"""``cdctl bench formation``: how fast a ComputeDomain forms and tears down, and what it costs.

For each N, in a running sim with the driver installed: create a ComputeDomain and N pods
(``bench.placement``: one per node asking for all its GPUs by default, podAffinity on the NVLink
clique when they fit in one rack like the seed example, pinned per rack beyond; or several pods
per node sharing its GPUs), then measure from the apply to

* every daemon pod Ready,
* every workload pod Running and Ready (its channel was injected: the plugin only returns the
  channel once the node's daemon is Ready),
* every daemon's own Ready report (its entry in the clique object),
* the ComputeDomain ``Ready`` with all its nodes (N ÷ pods per node),

then check from each workload container's log that it saw its channel (``bench.channels``),
read the daemons' own start-up step timings from their logs (``bench.daemonsteps``), then
delete both and measure until no daemon pod, clique, node label or claim remains. API
requests are counted per phase from the kube-apiserver's own ``apiserver_request_total`` (by
verb and resource), and the API server's open watches (``apiserver_longrunning_requests`` with
verb WATCH, by resource) are read just before the apply and once formed (both by
``bench.apicounts``). Formation timestamps are taken when watch events arrive, so the numbers
are what a user watching the cluster would see, without a sampling period.

Without a ComputeDomain (``placement.Workload`` ``affinity`` or ``plain``) the run measures the
same pods from the apply to every pod Running and Ready, and the teardown until no pod is left;
the CD's, daemons' and cliques' timings are None (not measured, not zero), and there is no
channel to check and no daemon log to read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics
from collections.abc import Callable, Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from compute_domains.bench import (
    apicounts,
    channels,
    daemonsteps,
    observe,
    placement,
    schedevents,
)
from compute_domains.infra import kube


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """One formation + teardown of N pods."""

    n: int
    daemons_ready_s: float | None
    """Every daemon pod Ready; None for a workload without a CD (so are the next three's)."""
    workloads_running_s: float
    cd_ready_s: float | None
    entries_ready_s: float | None
    """Every daemon reported Ready in its clique entry (the daemon's own word)."""
    last_daemon_to_cd_ready_s: float | None
    """From the last daemon's Ready report to the CD ``Ready``: the status path's latency."""
    teardown_s: float | None
    """Delete → nothing of the run left; None when that did not happen within the bound
    (``teardown_problem`` says what stayed: the formation's figures are kept all the same)."""
    writes_formation: int
    writes_formation_no_leases: int
    """Formation writes without Lease renewals (node and leader heartbeats)."""
    writes_teardown: int
    requests_formation: dict[str, int]
    """Every API request of the formation by ``VERB resource``, most frequent first (all of them:
    writes per kind per node are compared between drivers, issue 17)."""
    requests_teardown: dict[str, int] = dataclasses.field(default_factory=dict)
    """The same for the teardown (from the delete until nothing of the CD is left)."""
    failed_formation: dict[str, int] = dataclasses.field(default_factory=dict)
    """The formation's refused requests by ``VERB resource code`` (409 conflicts, 422 failed
    patch tests, ...), most frequent first; empty when none was refused."""
    milestones: dict[str, float] = dataclasses.field(default_factory=dict)
    """Seconds from the apply until every pod/entry reached each stage (phase breakdown)."""
    teardown_problem: str = ""
    """Why ``teardown_s`` is None (what was still there at the bound); empty when it ended."""
    scheduler_moves: dict[str, int] = dataclasses.field(default_factory=dict)
    """From the apply until formed: how often kube-scheduler put a pod in its queues, by the
    kind of event that did (a new pod; a cluster event re-queueing a parked one), most first
    (``schedevents``; empty when its page was not read)."""
    scheduler_handling_s: dict[str, float] = dataclasses.field(default_factory=dict)
    """The same span: seconds kube-scheduler spent handling each kind of event, longest first."""
    curves: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    """Seconds from the apply at which each workload pod was first Running, each daemon pod
    Ready and each clique entry Ready, sorted (``observe.Observer.curves``; result files before
    2026-12-06 have none): the formation curve."""
    load_start: float = 0.0
    """The machine's 1-minute load average at the apply (a loaded machine runs slower)."""
    load_end: float = 0.0
    """The 1-minute load average once the teardown was complete."""
    settle_s: float = 0.0
    """How long the bench waited for the machine to settle before the apply (``bench.settle``;
    0 in result files before 2026-12-07, whose applies followed the install at once)."""
    busy_at_apply: float | None = None
    """Share of all cores busy in the settle wait's last window (None: not waited)."""
    channel_problems: list[str] = dataclasses.field(default_factory=list)
    """Workload pods that ran without their IMEX channel (``bench.channels``); empty when
    every container saw it."""
    daemon_steps: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    """The daemons' start-up steps over the run's daemons (``bench.daemonsteps.summarize``);
    empty for a driver whose daemons do not log them."""
    pods_per_node: int = 1
    """Workload pods per domain node (NVIDIA's issue #816 shape: 4); N is the pod count."""
    watches_idle: dict[str, int] = dataclasses.field(default_factory=dict)
    """Watches open in the API server just before the apply, by resource (issue 28: every
    node's plugin and kubelet, the controller, the bench's own observers)."""
    watches_formed: dict[str, int] = dataclasses.field(default_factory=dict)
    """The same once formed (the daemons' or agents' watches added)."""
    sim_nodes: int = 0
    """Nodes in the sim (the idle watches grow with them, not with N)."""
    workload: str = placement.Workload.CLAIMS.value
    """What the pods asked for (``placement.Workload``); result files without it are claims."""


async def until_done(
    waiting: asyncio.Task[None],
    line: Callable[[], str],
    progress: Callable[[str], object] | None,
    every: float,
) -> None:
    """Await ``waiting``; meanwhile hand ``line()`` to ``progress`` every ``every`` seconds."""
    while progress is not None and not waiting.done():
        await asyncio.wait({waiting}, timeout=every)
        if not waiting.done():
            progress(line())
    await waiting


def formed_line(marks: Mapping[str, float], *, domain: bool) -> str:
    """The formation's result in one line, said as soon as it formed."""
    line = f"formed: all pods Running at {marks['workloads']:.1f}s"
    if domain:
        line += f", CD Ready at {marks['cd']:.1f}s, entries Ready at {marks['cliques']:.1f}s"
    return line


async def one_run(
    client: AsyncClient,
    fetch: apicounts.MetricsFetch,
    n: int,
    *,
    ns: str,
    driver_ns: str,
    name: str,
    timeout: float = 600,
    on_formed: Callable[[], object] | None = None,
    pods_per_node: int = 1,
    workload: placement.Workload = placement.Workload.CLAIMS,
    progress: Callable[[str], object] | None = None,
    progress_every: float = 15.0,
    scheduler: apicounts.MetricsFetch | None = None,
) -> Run:
    """Form a domain of ``n`` pods (or, without a CD, start them), tear it down, return the
    timings; ``on_formed`` is called between the two (e.g. to sample CPU use per phase), and
    ``progress`` every ``progress_every`` seconds of the formation with where it stands;
    ``scheduler`` (kube-scheduler's page) is read before the apply and once formed."""
    load_start = os.getloadavg()[0]
    watches_idle = await apicounts.watch_counts(fetch)
    sim_nodes = len(await kube.list_raw(client, Node))
    before = await apicounts.request_counts(fetch)
    failed_before = await apicounts.failure_counts(fetch)
    sched_before = schedevents.keep(await scheduler()) if scheduler is not None else ""
    uid, observer, waiting = await observe.apply(
        client,
        n,
        ns=ns,
        driver_ns=driver_ns,
        name=name,
        timeout=timeout,
        pods_per_node=pods_per_node,
        workload=workload,
    )
    await until_done(waiting, observer.progress, progress, progress_every)
    marks = observer.marks
    if progress is not None:
        # At once: what follows (reading every pod's log, the teardown) is long at thousands of
        # nodes, and a run cut there must still have said what it measured.
        progress(formed_line(marks, domain=uid is not None))
    if on_formed is not None:
        on_formed()
    mid = await apicounts.request_counts(fetch)
    watches_formed = await apicounts.watch_counts(fetch)
    failed_mid = await apicounts.failure_counts(fetch)
    # Formed: what the formation made the scheduler re-examine (both pages must be there).
    sched_mid = schedevents.keep(await scheduler()) if scheduler is not None else ""
    sched = schedevents.less(sched_mid, sched_before) if sched_before and sched_mid else ""
    # After the formation's request count: reading logs must not count as formation work.
    missing_channels: list[str] = []
    steps: dict[str, dict[str, float]] = {}
    if uid is not None:  # without a CD no pod has a channel and no daemon ran
        missing_channels = await channels.problems(client, ns=ns, name=name, n=n)
        steps = await daemonsteps.collect(client, driver_ns=driver_ns, uid=uid)
    teardown: float | None = None
    teardown_problem = ""
    try:
        teardown = await observe.delete_and_wait(
            client, uid=uid, ns=ns, name=name, driver_ns=driver_ns, timeout=timeout
        )
    except (TimeoutError, kube.KubeError) as err:
        # The formation was measured: keep it, and say what the teardown left or why it failed.
        teardown_problem = str(err)
    after = await apicounts.request_counts(fetch)
    form_delta = mid - before
    domain = uid is not None  # without a CD its marks are absent: None, not zero
    return Run(
        n=n,
        daemons_ready_s=marks["daemons"] if domain else None,
        workloads_running_s=marks["workloads"],
        cd_ready_s=marks["cd"] if domain else None,
        entries_ready_s=marks["cliques"] if domain else None,
        last_daemon_to_cd_ready_s=marks["cd"] - marks["cliques"] if domain else None,
        teardown_s=teardown,
        teardown_problem=teardown_problem,
        scheduler_moves=schedevents.moved(sched),
        scheduler_handling_s={e: s for e, (_, s) in schedevents.handling(sched).items()},
        writes_formation=apicounts.count_writes(form_delta),
        writes_formation_no_leases=apicounts.count_writes(form_delta, leases=False),
        writes_teardown=apicounts.count_writes(after - mid),
        requests_formation=dict(form_delta.most_common()),
        requests_teardown=dict((after - mid).most_common()),
        failed_formation=dict((failed_mid - failed_before).most_common()),
        milestones=dict(sorted(marks.items(), key=lambda kv: kv[1])),
        curves=observer.curves(),
        load_start=load_start,
        load_end=os.getloadavg()[0],
        channel_problems=missing_channels,
        daemon_steps=steps,
        pods_per_node=pods_per_node,
        watches_idle=dict(watches_idle.most_common()),
        watches_formed=dict(watches_formed.most_common()),
        sim_nodes=sim_nodes,
        workload=workload.value,
    )


def summarize(runs: list[Run]) -> dict[str, Any]:
    """Median and spread (min..max) of every timing of the runs of one N; a timing the runs
    did not measure (None: no CD) is None."""
    fields = (
        "daemons_ready_s",
        "workloads_running_s",
        "cd_ready_s",
        "entries_ready_s",
        "last_daemon_to_cd_ready_s",
        "teardown_s",
        "writes_formation",
        "writes_formation_no_leases",
        "writes_teardown",
    )
    out: dict[str, Any] = {
        "n": runs[0].n,
        "nodes": runs[0].n // runs[0].pods_per_node,
        "repeats": len(runs),
        "workload": runs[0].workload,
    }
    for f in fields:
        measured = [getattr(r, f) for r in runs]
        if any(v is None for v in measured):
            out[f] = None
            continue
        values = [float(v) for v in measured]
        out[f] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    out["watches"] = watch_summary(runs[0])
    return out


def watch_summary(run: Run) -> dict[str, float]:
    """The API server's open watches of one run: in all before the apply and once formed, per
    sim node before the apply, and added per domain node by the formation (daemons, agents)."""
    idle, formed = sum(run.watches_idle.values()), sum(run.watches_formed.values())
    nodes = max(1, run.n // run.pods_per_node)
    return {
        "idle": idle,
        "formed": formed,
        "sim_nodes": run.sim_nodes,
        "idle_per_sim_node": round(idle / run.sim_nodes, 2) if run.sim_nodes else 0.0,
        "added_per_domain_node": round((formed - idle) / nodes, 2),
    }
