#!/usr/bin/env python3
"""Profile of one ComputeDomain's status pass at thousands of nodes, without a simulator
(issue 28 point 3: "last daemon → CD Ready ≤ 1 s").

Fills the controller's caches with one CD of ``--nodes`` nodes (cliques of 18, one daemon pod,
one Ready Node and one placed workload claim per node), as resident per-domain agents leave
them, and times one ``Reconciler.reconcile`` of that CD (what a work-queue worker runs: scope,
warm spares, workload template, then ``StatusSync.sync``) in four cases:

- ``verdict``: the last clique entry turns Ready, the CD turns Ready (written at once);
- ``progress-written``: one entry turns Ready mid-formation, the progress interval is over
  (written);
- ``progress-deferred``: the same inside the interval (not written, the CD re-enqueued);
- ``steady``: nothing changed (not written).

The API is a stand-in: the controller's own lightkube client over an in-memory httpx
transport, so the request's JSON encoding and the response's decoding into the cache are
the real ones; the API server's own cost of a write is not in these numbers (``--api-ms``
adds a fixed delay per request to model it). Prints wall and CPU seconds per pass (median of
``--repeats``), the size of the status written, the requests made, and the top functions of
one profiled pass per case::

    PYTHONPATH=src python -m bench.status_profile --nodes 1152 2304 4608
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import io
import json
import pstats
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.controller import caches, config, events, kubeapi, metrics, reconcile
from compute_domains.infra import backoff, workqueue

NS, USER_NS, CD_NAME = "driver", "user", "cd-bench"
UID = "0b1e2c3d-0000-4000-8000-00000000beef"
PER_CLIQUE = 18
CASES = ("verdict", "progress-written", "progress-deferred", "steady")


class FakeServer:
    """The few API calls a reconcile of a formed CD makes, answered from memory."""

    def __init__(self, api_ms: float) -> None:
        self.cds: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, int]] = []
        self.on_status: Callable[[dict[str, Any]], None] | None = None
        """Told each status write (``--timeline``: the watch's echo, the Ready's arrival)."""
        self._rv = 1000
        self._api_s = api_ms / 1000

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        """Answer one request (a CD status or metadata patch, or a POST echoed back)."""
        if self._api_s:
            await asyncio.sleep(self._api_s)
        body = request.content
        self.requests.append((request.method, request.url.path, len(body)))
        parts = request.url.path.strip("/").split("/")
        data = json.loads(body) if body else None
        if "computedomains" in parts:
            name = parts[parts.index("computedomains") + 1]
            cd = self.cds[name]
            if parts[-1] == "status":
                for op in data:  # JSON patch: only "add /status" is used
                    assert op["op"] in ("add", "replace") and op["path"] == "/status"
                    cd["status"] = op["value"]
                cd["metadata"]["resourceVersion"] = self._next_rv()
                if self.on_status is not None:
                    self.on_status(copy.deepcopy(cd))
                return httpx.Response(200, json=cd)
            for key, value in data.get("metadata", {}).items():  # a merge patch of metadata
                if key == "annotations":
                    cd["metadata"].setdefault("annotations", {}).update(value)
                elif key != "resourceVersion":
                    cd["metadata"][key] = value
            cd["metadata"]["resourceVersion"] = self._next_rv()
            return httpx.Response(200, json=cd)
        if request.method == "POST":  # an Event, a template: echo it with a name
            data.setdefault("metadata", {})
            data["metadata"].setdefault("name", f"obj-{self._next_rv()}")
            data["metadata"]["resourceVersion"] = self._next_rv()
            data["metadata"]["uid"] = f"uid-{self._rv}"
            return httpx.Response(201, json=data)
        return httpx.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound"})


def _client(server: FakeServer) -> AsyncClient:
    cfg = KubeConfig.from_one(cluster=Cluster(server="http://bench.invalid"), user=User())
    transport = httpx.MockTransport(server.handle)
    return AsyncClient(cfg, field_manager="bench", trust_env=False, transport=transport)


def _clique_id(c: int) -> str:
    return f"c0ffee00-0000-0000-0000-000000000001.{c}"


def _node(i: int, clique: str) -> Any:
    return Node.from_dict(
        {
            "metadata": {
                "name": f"node-{i:05d}",
                "resourceVersion": "1",
                "labels": {
                    names.GPU_CLIQUE_LABEL: clique,
                    names.COMPUTE_DOMAIN_LABEL: UID,
                },
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    )


def _pod(i: int, clique: str) -> Any:
    ip = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"
    return Pod.from_dict(
        {
            "metadata": {
                "name": f"agent-node-{i:05d}",
                "namespace": NS,
                "resourceVersion": "1",
                "labels": {names.COMPUTE_DOMAIN_LABEL: UID, names.CLIQUE_ID_LABEL: clique},
            },
            "spec": {"nodeName": f"node-{i:05d}", "containers": [{"name": "agent"}]},
            "status": {
                "phase": "Running",
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "agent",
                        "image": "x",
                        "imageID": "",
                        "ready": True,
                        "restartCount": 0,
                    }
                ],
            },
        }
    )


def _claim(i: int) -> Any:
    node = f"node-{i:05d}"
    params = {
        "apiVersion": names.API_VERSION,
        "kind": names.CHANNEL_CONFIG_KIND,
        "domainID": UID,
        "allocationMode": "Single",
    }
    return ResourceClaim.from_dict(
        {
            "metadata": {"name": f"w-{i:05d}", "namespace": USER_NS, "resourceVersion": "1"},
            "spec": {
                "devices": {
                    "requests": [{"name": names.CHANNEL_REQUEST}],
                    "config": [{"opaque": {"driver": names.DRIVER_NAME, "parameters": params}}],
                }
            },
            "status": {
                "allocation": {
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node]}
                                ]
                            }
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": f"w-{i:05d}", "uid": "u"}],
            },
        }
    )


def _clique(c: int, ready: Callable[[int], bool], rv: int) -> Any:
    clique = _clique_id(c)
    daemons = []
    for k in range(PER_CLIQUE):
        i = c * PER_CLIQUE + k
        daemons.append(
            {
                "nodeName": f"node-{i:05d}",
                "ipAddress": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
                "cliqueID": clique,
                "index": k,
                "status": "Ready" if ready(i) else "NotReady",
            }
        )
    return ComputeDomainCliqueResource.from_dict(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.CLIQUE_KIND,
            "metadata": {
                "name": names.clique_object_name(UID, clique),
                "namespace": NS,
                "resourceVersion": str(rv),
                "labels": {names.COMPUTE_DOMAIN_LABEL: UID, names.CLIQUE_ID_LABEL: clique},
            },
            "daemons": daemons,
        }
    )


class Bench:
    """One controller's caches and reconciler over the fake server, for one case."""

    def __init__(self, n: int, *, interval_s: float, api_ms: float) -> None:
        self.n = n
        self.server = FakeServer(api_ms)
        self.settings = config.ControllerSettings(
            namespace=NS,
            daemon=config.DaemonSettings(image="bench:0"),
            imex_agents=config.IMEX_AGENTS_RESIDENT,
            status_progress_interval_s=interval_s,
            metrics_port=0,
        )
        self.meter = metrics.Metrics()
        self.api = kubeapi.Api(_client(self.server), self.meter)
        self.enqueued: list[tuple[str, float]] = []
        self.forward: Callable[[str, float], None] | None = None
        self.cache = caches.Caches(self.api, self.settings, self._enqueue)
        recorder = events.EventRecorder(self.api, instance="bench")
        self.reconciler = reconcile.Reconciler(
            api=self.api,
            cache=self.cache,
            settings=self.settings,
            recorder=recorder,
            meter=self.meter,
            enqueue=self._enqueue,
        )
        self._clique_rv = 10

    def _enqueue(self, key: str, delay: float) -> None:
        self.enqueued.append((key, delay))
        if self.forward is not None:
            self.forward(key, delay)

    def fill(self, ready: Callable[[int], bool]) -> None:
        """Cache the CD and, per node, its Node, agent pod, claim and clique entry."""
        cd = {
            "apiVersion": names.API_VERSION,
            "kind": names.COMPUTE_DOMAIN_KIND,
            "metadata": {
                "name": CD_NAME,
                "namespace": USER_NS,
                "uid": UID,
                "resourceVersion": "100",
                "generation": 1,
            },
            "spec": {
                "numNodes": self.n,
                "channel": {"resourceClaimTemplate": {"name": "bench-channel"}},
            },
        }
        self.server.cds[CD_NAME] = cd
        self.cache.cds.observe(ComputeDomainResource.from_dict(copy.deepcopy(cd)))
        for c in range(self.n // PER_CLIQUE):
            for k in range(PER_CLIQUE):
                i = c * PER_CLIQUE + k
                self.cache.nodes.observe(_node(i, _clique_id(c)))
                self.cache.pods.observe(_pod(i, _clique_id(c)))
                self.cache.claims.observe(_claim(i))
            self.cache.cliques.observe(_clique(c, ready, self._clique_rv))

    def set_clique(self, c: int, ready: Callable[[int], bool], *, watched: bool = False) -> None:
        """A daemon's report: clique ``c`` rewritten with ``ready`` (a newer version); as the
        watch delivers it (its change handlers run) when ``watched``."""
        self._clique_rv += 1
        obj = _clique(c, ready, self._clique_rv)
        if watched:
            self.cache.cliques._apply("MODIFIED", obj)
        else:
            self.cache.cliques.observe(obj)

    async def reconcile(self) -> None:
        """One pass of the CD, as a work-queue worker runs it."""
        await self.reconciler.reconcile(UID)


async def _prepare(case: str, n: int, api_ms: float) -> tuple[Bench, Callable[[], None]]:
    """A bench whose stored status is the controller's own write of the state before the
    change, and the change (a clique entry's report) that the timed pass then sees."""
    last = n - 1
    half = n // 2
    if case == "verdict":
        b = Bench(n, interval_s=1.0, api_ms=0)
        b.fill(lambda i: i != last)

        def change() -> None:
            b.set_clique(last // PER_CLIQUE, lambda i: True)
    elif case in ("progress-written", "progress-deferred"):
        interval = 0.0 if case == "progress-written" else 3600.0
        b = Bench(n, interval_s=interval, api_ms=0)
        b.fill(lambda i: i < half)

        def change() -> None:
            b.set_clique(half // PER_CLIQUE, lambda i: i <= half)
    else:
        b = Bench(n, interval_s=1.0, api_ms=0)
        b.fill(lambda i: True)

        def change() -> None:
            pass

    await b.reconcile()  # the first status: written (and the finalizer, the template)
    await b.reconcile()  # settled: the next pass writes nothing
    b.server._api_s = api_ms / 1000
    b.server.requests.clear()
    b.enqueued.clear()
    return b, change


async def _one(
    case: str, n: int, api_ms: float, profile: cProfile.Profile | None
) -> dict[str, Any]:
    b, change = await _prepare(case, n, api_ms)
    change()
    if profile is not None:
        profile.enable()
    wall, cpu = time.perf_counter(), time.process_time()
    await b.reconcile()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if profile is not None:
        profile.disable()
    status = (b.cache.cd(UID) or {}).get("status") or {}
    writes = [r for r in b.server.requests if r[1].endswith("/status")]
    await b.api.client.close()
    return {
        "wall": wall,
        "cpu": cpu,
        "requests": len(b.server.requests),
        "status_writes": len(writes),
        "written_bytes": writes[0][2] if writes else 0,
        "cd_status": status.get("status"),
        "ready_nodes": status.get("readyNodes"),
        "enqueued": list(b.enqueued),
    }


async def _timeline(n: int, rate: float, echo_ms: float, api_ms: float) -> dict[str, Any]:
    """The last two seconds of a formation through the real work queue: entries turn Ready at
    ``rate`` a second (each a watched clique change: coalesced, enqueued), every status write
    comes back as a watch event ``echo_ms`` later; returns the last entry → Ready-write time."""
    loop = asyncio.get_running_loop()
    late = list(range(n - int(rate * 2), n))
    ready = set(range(n)) - set(late)
    b = Bench(n, interval_s=1.0, api_ms=0)
    b.fill(lambda i: i in ready)
    await b.reconcile()
    await b.reconcile()
    b.server._api_s = api_ms / 1000
    queue: workqueue.WorkQueue[str] = workqueue.WorkQueue(
        retry_backoff=backoff.Backoff(initial=0.2, maximum=10.0)
    )
    b.forward = queue.add
    done = asyncio.Event()
    writes: list[tuple[float, int]] = []
    marks: dict[str, float] = {}

    def on_status(cd: dict[str, Any]) -> None:
        writes.append((loop.time(), cd["status"]["readyNodes"]))
        if cd["status"]["status"] == "Ready":
            marks["ready"] = loop.time()
            done.set()
        echo = ComputeDomainResource.from_dict(cd)
        loop.call_later(echo_ms / 1000, b.cache.cds._apply, "MODIFIED", echo)

    b.server.on_status = on_status
    passes: list[tuple[float, float]] = []

    async def work() -> None:
        while True:
            key = await queue.get()
            start = loop.time()
            try:
                await b.reconcile()
            finally:
                passes.append((start, loop.time()))
                queue.done(key)

    worker = asyncio.create_task(work())
    start = loop.time()
    for k, i in enumerate(late):
        due = start + (k + 1) / rate  # when the report reaches the controller's socket
        await asyncio.sleep(max(0.0, due - loop.time()))  # (later while a pass holds the loop)
        ready.add(i)
        b.set_clique(i // PER_CLIQUE, lambda k: k in ready, watched=True)
        marks["last"] = due
    async with asyncio.timeout(60):
        await done.wait()
    worker.cancel()
    await asyncio.gather(worker, return_exceptions=True)
    await b.api.client.close()
    busy = [p for p in passes if p[0] <= marks["last"] < p[1]]
    durations = [e - s for s, e in passes]
    return {
        "latency": marks["ready"] - marks["last"],
        "in_flight_left": busy[0][1] - marks["last"] if busy else 0.0,
        "passes": len(passes),
        "pass_median": statistics.median(durations) if durations else 0.0,
        "writes": len(writes),
        "written": [(round(t - start, 2), r) for t, r in writes],
    }


def _top(profile: cProfile.Profile, limit: int) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(limit)
    lines = out.getvalue().splitlines()
    start = next((k for k, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(lines[start:])


async def main_async(args: argparse.Namespace) -> None:
    """Run the cases of ``args`` and print their table."""
    if args.timeline:
        print(
            "| nodes | last entry → Ready write s | left of the pass in flight s | passes "
            "| pass median s | status writes |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        for n in args.nodes:
            for _ in range(args.repeats):
                t = await _timeline(n, args.rate, args.echo_ms, args.api_ms)
                print(
                    f"| {n:,} | {t['latency']:.3f} | {t['in_flight_left']:.3f} | "
                    f"{t['passes']:.0f} | {t['pass_median']:.3f} | {t['writes']:.0f} |",
                    flush=True,
                )
                if args.verbose:
                    print(f"  writes (s after the first report, readyNodes): {t['written']}")
        return
    rows = []
    for n in args.nodes:
        for case in args.cases:
            runs = [await _one(case, n, args.api_ms, None) for _ in range(args.repeats)]
            profile = cProfile.Profile()
            await _one(case, n, args.api_ms, profile)
            last = runs[-1]
            row = {
                "nodes": n,
                "case": case,
                "wall_s": statistics.median(r["wall"] for r in runs),
                "cpu_s": statistics.median(r["cpu"] for r in runs),
                "requests": last["requests"],
                "status_writes": last["status_writes"],
                "written_kb": last["written_bytes"] / 1024,
                "cd": f"{last['cd_status']} {last['ready_nodes']}/{n}",
            }
            rows.append(row)
            print(
                f"== {n} nodes, {case}: wall {row['wall_s']:.3f} s, cpu {row['cpu_s']:.3f} s, "
                f"{row['requests']} requests, {row['status_writes']} status writes "
                f"({row['written_kb']:.0f} KiB), CD {row['cd']}, enqueued {last['enqueued']}",
                flush=True,
            )
            if args.top:
                print(_top(profile, args.top), flush=True)
    print("\n| nodes | case | wall s | CPU s | status write (KiB) | requests |")
    print("|---:|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['nodes']:,} | {r['case']} | {r['wall_s']:.3f} | {r['cpu_s']:.3f} | "
            f"{r['written_kb']:.0f} | {r['requests']} |"
        )


def main() -> None:
    """Parse the options and run the cases."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1152, 2304, 4608])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=15, help="profiled functions shown (0: none)")
    parser.add_argument("--api-ms", type=float, default=0.0, help="delay per API request")
    parser.add_argument("--timeline", action="store_true", help="the last 2 s of a formation")
    parser.add_argument("--rate", type=float, default=27.0, help="entries Ready a second")
    parser.add_argument("--verbose", action="store_true", help="timeline: list the writes")
    parser.add_argument("--echo-ms", type=float, default=50.0, help="write → its watch event")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
