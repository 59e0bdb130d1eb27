"""What the benchmarks do around a formation: the workload they create, and its teardown with
what of it is left.

Shared by ``formation`` (timings) and ``churn`` (consistency under create/delete load):
``apply`` creates one ComputeDomain plus the Deployments of its N pods (``placement`` says
where they go) and starts an ``observer.Observer`` on them; ``leftovers`` lists whatever of a
deleted domain is still in the cluster; ``delete_and_wait`` deletes and waits until nothing
of it is left.

The observer (its milestones, the formation curve ``CURVES``, the pod helpers ``ready`` and
``stage``) lives in ``bench/observer.py``; those names are re-exported here, where their
callers have always found them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import clique, computedomain, names
from compute_domains.bench import placement
from compute_domains.bench.observer import CURVES as CURVES
from compute_domains.bench.observer import Observer as Observer
from compute_domains.bench.observer import ready as ready
from compute_domains.bench.observer import stage as stage
from compute_domains.infra import kube


async def gpu_nodes(client: AsyncClient) -> list[placement.GpuNode]:
    """The cluster's GPU nodes, as ``placement.plan`` takes them."""
    out = []
    async for node in client.list(Node):
        labels = dict(node.metadata.labels or {}) if node.metadata else {}
        gpus = int(((node.status.capacity or {}) if node.status else {}).get("nvidia.com/gpu", 0))
        if gpus and node.metadata and node.metadata.name:
            out.append(
                placement.GpuNode(
                    name=node.metadata.name,
                    cluster_uuid=labels.get(placement.CLUSTER_UUID_LABEL, ""),
                    clique=placement.clique_of(labels),
                    gpus=gpus,
                )
            )
    return out


async def wait_until(check: Any, timeout: float) -> float:
    """Seconds until ``check()`` holds (re-checked on a short period; bounded)."""
    t0 = time.monotonic()
    while not await check():
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"not reached in {timeout:.0f}s")
        await asyncio.sleep(0.25)  # bench sampling period (its own reads are not writes)
    return time.monotonic() - t0


async def _names(client: AsyncClient, res: Any, **where: Any) -> list[str]:
    return [str(obj.metadata.name) async for obj in client.list(res, **where)]


MAX_LEFT_SHOWN = 10
"""Leftovers a teardown timeout names (then how many more)."""


async def leftovers(
    client: AsyncClient, *, uid: str | None, ns: str, name: str, driver_ns: str
) -> list[str]:
    """What of the deleted domain ``name`` (``uid``) and its workload is still there; with
    ``uid`` None (the run made no CD) only the workload's pods and claims are looked for."""
    left = [
        f"workload pod {p}" for p in await _names(client, Pod, namespace=ns, labels={"bench": name})
    ]
    # Claims generated for the workload's pods are named after them: "<deployment>-...".
    left += [
        f"claim {c}"
        for c in await _names(client, ResourceClaim, namespace=ns)
        if c.startswith(f"{name}-")
    ]
    if uid is None:
        return left
    mine = {names.COMPUTE_DOMAIN_LABEL: uid}
    left += [f"daemon pod {p}" for p in await _names(client, Pod, namespace=driver_ns, labels=mine)]
    left += [
        f"clique {c}"
        for c in await _names(client, clique.ComputeDomainCliqueResource, namespace=driver_ns)
        if c.startswith(uid)
    ]
    left += [f"label on node {x}" for x in await _names(client, Node, labels=mine)]
    try:
        with kube.translated(f"get ComputeDomain {name}"):
            await client.get(computedomain.ComputeDomainResource, name, namespace=ns)
        left.append(f"ComputeDomain {name}")
    except kube.KubeError as err:
        if not err.code:
            raise  # no answer: the caller's transport trouble, as before
    return left


async def apply(
    client: AsyncClient,
    n: int,
    *,
    ns: str,
    driver_ns: str,
    name: str,
    timeout: float,
    pods_per_node: int = 1,
    workload: placement.Workload = placement.Workload.CLAIMS,
) -> tuple[str | None, Observer, asyncio.Task[None]]:
    """Create the CD ``name`` (when ``workload`` has one) and its ``n``-pod workload
    (``pods_per_node`` on each node); returns the CD's UID (None without a CD), the observer
    that timestamps from this moment, and the task that ends when every milestone was seen (it
    raises TimeoutError after ``timeout`` seconds).

    Raises:
        placement.PlacementError: the cluster cannot hold that workload (nothing was created).
    """
    groups = placement.plan(n, pods_per_node, await gpu_nodes(client))
    cd_doc, deployments = placement.manifests(n, ns, name, groups, workload)
    t0 = time.monotonic()
    uid = None
    if cd_doc is not None:
        created = await client.create(computedomain.ComputeDomainResource(**cd_doc))
        uid = str(created.metadata.uid)  # type: ignore[union-attr]
    observer = Observer(
        client, n, nodes=n // pods_per_node, ns=ns, driver_ns=driver_ns, name=name, uid=uid, t0=t0
    )
    waiting = asyncio.create_task(observer.wait(timeout))
    for dep in deployments:
        await client.create(dep)
    return uid, observer, waiting


async def delete_and_wait(
    client: AsyncClient, *, uid: str | None, ns: str, name: str, driver_ns: str, timeout: float
) -> float:
    """Delete the workload and the CD (``uid`` None: there is none); seconds until nothing of
    them is left (TimeoutError, naming what was still there; ``kube.KubeError`` when a delete
    failed)."""
    with kube.translated(f"delete the workload and the ComputeDomain {name}"):
        async for dep in client.list(Deployment, namespace=ns, labels={"bench": name}):
            assert dep.metadata is not None and dep.metadata.name is not None
            await client.delete(Deployment, dep.metadata.name, namespace=ns)
        if uid is not None:
            await client.delete(computedomain.ComputeDomainResource, name, namespace=ns)

    async def stayed() -> list[str] | None:
        try:
            with kube.translated("list what the teardown left"):
                return await leftovers(client, uid=uid, ns=ns, name=name, driver_ns=driver_ns)
        except kube.Unreachable:
            # No answer (at 4,608 nodes the API server dropped such a list mid-teardown, and
            # the run was lost with its formation's figures): not known yet.
            return None

    async def gone() -> bool:
        return await stayed() == []

    try:
        return await wait_until(gone, timeout)
    except TimeoutError as err:
        # A teardown that never ends is a leak to find: say what stayed, not only how long.
        left = await stayed()
        if left is None:
            raise TimeoutError(f"teardown {err}: what stayed is not known (no answer)") from err
        shown = ", ".join(left[:MAX_LEFT_SHOWN]) or "nothing by now"
        more = f" and {len(left) - MAX_LEFT_SHOWN} more" if len(left) > MAX_LEFT_SHOWN else ""
        raise TimeoutError(f"teardown {err}: still there: {shown}{more}") from err
