"""``cdctl bench formation``: how fast a ComputeDomain forms and tears down, and what it costs.

For each N, in a running sim with the driver installed: create a ComputeDomain and a Deployment
of N pods (one per node: each asks for all 4 GPUs of a node; podAffinity on the NVLink clique
when N fits in one rack, like the seed example), then measure from the apply to

* every daemon pod Ready,
* every workload pod Running and Ready (its channel was injected: the plugin only returns the
  channel once the node's daemon is Ready),
* the ComputeDomain ``Ready`` with N nodes,

then delete both and measure until no daemon pod, clique, node label or claim remains. API
requests are counted per phase from the kube-apiserver's own ``apiserver_request_total`` (by
verb and resource). Timestamps come from watching the objects, so the numbers are what a user
watching the cluster would see.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import clique, computedomain, names

WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """One formation + teardown of N pods."""

    n: int
    daemons_ready_s: float
    workloads_running_s: float
    cd_ready_s: float
    last_daemon_to_cd_ready_s: float
    teardown_s: float
    writes_formation: int
    writes_teardown: int
    requests_formation: dict[str, int]


def _ready(pod: Any) -> bool:
    return bool(pod.status and any(c.type == "Ready" and c.status == "True"
                                   for c in pod.status.conditions or []))


MetricsFetch = Callable[[], Awaitable[str]]


async def request_counts(fetch: MetricsFetch) -> Counter[str]:
    """``verb resource`` → count, from the API server's ``/metrics`` text."""
    counts: Counter[str] = Counter()
    for line in (await fetch()).splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_part, value = line.rsplit(" ", 1)
        labels = dict(kv.split("=", 1) for kv in labels_part[len("apiserver_request_total{"):-1]
                      .replace('"', "").split(","))
        counts[f"{labels.get('verb', '?')} {labels.get('resource', '?')}"] += int(float(value))
    return counts


def _writes(delta: Counter[str]) -> int:
    return sum(v for k, v in delta.items() if k.split(" ", 1)[0] in WRITE_VERBS)


def _manifests(n: int, ns: str, name: str, affinity: bool) -> tuple[dict[str, Any], Deployment]:
    cd = {"apiVersion": names.API_VERSION, "kind": "ComputeDomain",
          "metadata": {"name": name, "namespace": ns},
          "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-rct"}}}}
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "cd", "resourceClaimTemplateName": f"{name}-rct"}],
        "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "ctr", "image": "ubuntu:22.04", "command": ["mnnvl-workload"],
                        "resources": {"claims": [{"name": "cd"}],
                                      "limits": {"nvidia.com/gpu": 4}}}],
    }
    if affinity:
        spec["affinity"] = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"bench": name}},
             "topologyKey": names.GPU_CLIQUE_LABEL}]}}
    dep = Deployment.from_dict({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": n, "selector": {"matchLabels": {"bench": name}},
                 "template": {"metadata": {"labels": {"bench": name}}, "spec": spec}}})
    assert isinstance(dep, Deployment)
    return cd, dep


async def _wait(check: Any, timeout: float) -> float:
    """Seconds until ``check()`` holds (re-checked on a short period; bounded)."""
    t0 = time.monotonic()
    while not await check():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"not reached in {timeout:.0f}s")
        await asyncio.sleep(0.25)  # bench sampling period (its own reads are not writes)
    return time.monotonic() - t0


async def one_run(client: AsyncClient, fetch: MetricsFetch, n: int, *, ns: str,
                  driver_ns: str, name: str, timeout: float = 600) -> Run:
    """Form a domain of ``n`` pods, tear it down, return the timings."""
    cd_doc, dep = _manifests(n, ns, name, affinity=n <= 18)
    before = await request_counts(fetch)
    t0 = time.monotonic()
    await client.create(computedomain.ComputeDomainResource(**cd_doc))
    await client.create(dep)
    marks: dict[str, float] = {}
    uid_holder: list[str] = []

    async def state() -> bool:
        if not uid_holder:
            obj = await client.get(computedomain.ComputeDomainResource, name, namespace=ns)
            uid_holder.append(str(obj.metadata.uid))  # type: ignore[union-attr]
        now = time.monotonic() - t0
        daemons = [p async for p in client.list(Pod, namespace=driver_ns, labels={
            names.COMPUTE_DOMAIN_LABEL: uid_holder[0]})]
        if len(daemons) >= n and all(_ready(p) for p in daemons):
            marks.setdefault("daemons", now)
        pods = [p async for p in client.list(Pod, namespace=ns, labels={"bench": name})]
        if len(pods) == n and all(_ready(p) for p in pods):
            marks.setdefault("workloads", now)
        cd = (await client.get(computedomain.ComputeDomainResource, name, namespace=ns)
              ).to_dict()  # type: ignore[no-untyped-call]
        status = cd.get("status") or {}
        if status.get("status") == "Ready" and len(status.get("nodes") or []) == n:
            marks.setdefault("cd", now)
        return {"daemons", "workloads", "cd"} <= set(marks)

    await _wait(state, timeout)
    mid = await request_counts(fetch)
    await client.delete(Deployment, name, namespace=ns)
    await client.delete(computedomain.ComputeDomainResource, name, namespace=ns)

    async def gone() -> bool:
        uid = uid_holder[0]
        left: list[Any] = [p async for p in client.list(
            Pod, namespace=driver_ns, labels={names.COMPUTE_DOMAIN_LABEL: uid})]
        left += [p async for p in client.list(Pod, namespace=ns, labels={"bench": name})]
        left += [c async for c in client.list(clique.ComputeDomainCliqueResource,
                                              namespace=driver_ns)
                 if str(c.metadata.name).startswith(uid)]  # type: ignore[union-attr]
        left += [x async for x in client.list(Node, labels={names.COMPUTE_DOMAIN_LABEL: uid})]
        left += [c async for c in client.list(ResourceClaim, namespace=ns)]
        try:
            await client.get(computedomain.ComputeDomainResource, name, namespace=ns)
            left.append(name)
        except ApiError:
            pass
        return not left

    teardown = await _wait(gone, timeout)
    after = await request_counts(fetch)
    form_delta = mid - before
    return Run(n=n, daemons_ready_s=marks["daemons"], workloads_running_s=marks["workloads"],
               cd_ready_s=marks["cd"],
               last_daemon_to_cd_ready_s=max(0.0, marks["cd"] - marks["daemons"]),
               teardown_s=teardown, writes_formation=_writes(form_delta),
               writes_teardown=_writes(after - mid),
               requests_formation=dict(form_delta.most_common(12)))


def summarize(runs: list[Run]) -> dict[str, Any]:
    """Median and spread (min..max) of every timing of the runs of one N."""
    fields = ("daemons_ready_s", "workloads_running_s", "cd_ready_s",
              "last_daemon_to_cd_ready_s", "teardown_s", "writes_formation", "writes_teardown")
    out: dict[str, Any] = {"n": runs[0].n, "repeats": len(runs)}
    for f in fields:
        values = [float(getattr(r, f)) for r in runs]
        out[f] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out
