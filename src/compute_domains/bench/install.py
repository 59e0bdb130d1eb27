"""Install a driver with helm, as its users would, and wait until it can serve a ComputeDomain.

Every driver a benchmark measures goes through the same two steps, so neither gets a head
start: ``helm upgrade --install --wait`` of its chart with its values, then ``wait_ready``.
``helm --wait`` alone is not enough: a DaemonSet whose rolling update allows 100 % unavailable
(NVIDIA's chart) counts as ready while every plugin pod is still in its init container. So
``wait_ready`` waits until every pod in the release namespace is Ready, every DaemonSet and
Deployment there has all its pods Ready, every GPU node has published a ResourceSlice (a
plugin that has not published one cannot prepare a claim yet) and, where the sim tells it,
every node's kubelet has registered each driver that published a slice there (a pod whose
kubelet has not fails its prepare and waits for the kubelet's retry: seen once 0.6 s after the
bench had judged a 144-node driver ready, and one candidate for the stragglers that came 36 s
late at 144 and 288 virtual nodes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceSlice

from compute_domains.bench import drivers
from compute_domains.infra import errors
from compute_domains.sim import driver as sim_driver

GPU_RESOURCE = "nvidia.com/gpu"
"""Node capacity that marks a GPU node (the control-plane node has none)."""


def helm_argv(helm: Path, kubeconfig: Path, spec: drivers.DriverSpec, timeout_s: int) -> list[str]:
    """The ``helm upgrade --install`` command line for ``spec``."""
    return sim_driver.helm_install_argv(
        helm,
        kubeconfig,
        release=spec.release,
        chart=spec.chart,
        namespace=spec.namespace,
        timeout_s=timeout_s,
        values=tuple(spec.values),
    )


async def install(
    helm: Path,
    kubeconfig: Path,
    spec: drivers.DriverSpec,
    timeout_s: int = 300,
    client: AsyncClient | None = None,
) -> None:
    """Run helm for ``spec``; with ``client``, a failure also says why the pods are not Ready.

    Raises:
        errors.PermanentError: helm failed (its output's tail is in the message).
    """
    proc = await asyncio.create_subprocess_exec(
        *helm_argv(helm, kubeconfig, spec, timeout_s),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        text = out.decode(errors="replace").strip()
        # "context deadline exceeded" alone names no pod; what the pods say does.
        why = await _explain(client, spec.namespace) if client is not None else ""
        raise errors.PermanentError(
            f"helm could not install {spec.name} ({spec.chart}, exit {proc.returncode}):\n"
            f"{text[-2000:]}{why}"
        )


def not_ready(pods: list[dict[str, Any]]) -> tuple[list[str], str | None]:
    """Pods not Ready, grouped by container and state (``18 pod(s): container plugin
    CrashLoopBackOff, last exit 1 (Error), up to 7 restarts``), and one crash-looping pod."""
    groups: dict[str, list[int]] = {}
    looping: str | None = None
    for pod in pods:
        if _ready(pod):
            continue
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        for cs in statuses or [{"name": "-", "state": {"waiting": {"reason": "not started"}}}]:
            if cs.get("ready"):
                continue
            state = cs.get("state") or {}
            reason = next((v.get("reason") for v in state.values() if v), None) or "not Ready"
            text = f"container {cs.get('name')} {reason}"
            last = ((cs.get("lastState") or {}).get("terminated")) or {}
            if last:
                text += f", last exit {last.get('exitCode')} ({last.get('reason')})"
            groups.setdefault(text, []).append(int(cs.get("restartCount") or 0))
            if reason == "CrashLoopBackOff" and looping is None:
                looping = str(pod["metadata"]["name"])
    lines = [
        f"{len(restarts)} pod(s): {text}, up to {max(restarts)} restarts"
        for text, restarts in sorted(groups.items(), key=lambda kv: -len(kv[1]))
    ]
    return lines, looping


async def _explain(client: AsyncClient, namespace: str) -> str:
    """What the release's pods say after helm gave up; empty if they cannot be read."""
    try:
        pods = [p.to_dict() async for p in client.list(Pod, namespace=namespace)]
    except Exception as err:  # an explanation must never hide helm's own error
        return f"\n(the release's pods could not be read: {err})"
    lines, looping = not_ready(pods)
    if looping is not None:
        lines.append(f"why it exits: kubectl logs --previous -n {namespace} {looping}")
    return "".join(f"\n{line}" for line in lines[:6])


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _gpus(node: dict[str, Any]) -> int:
    capacity = (node.get("status") or {}).get("capacity") or {}
    try:
        return int(capacity.get(GPU_RESOURCE, 0))
    except ValueError:
        return 0


def missing(
    *,
    pods: list[dict[str, Any]],
    daemonsets: list[dict[str, Any]],
    deployments: list[dict[str, Any]],
    slices: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    registered: Mapping[str, Sequence[str]] | None = None,
) -> list[str]:
    """What still keeps the driver from serving (empty: it is ready); plain API dicts in;
    ``registered``: node → the DRA drivers its kubelet registered (None: not known)."""
    out = [] if pods else ["no pod in the release namespace yet"]
    out += [f"pod {p['metadata']['name']} not Ready" for p in pods if not _ready(p)]
    for ds in daemonsets:
        meta, status = ds["metadata"], ds.get("status") or {}
        # Before the DaemonSet controller has seen the current spec its counts say nothing.
        if (status.get("observedGeneration") or 0) < (meta.get("generation") or 0):
            out.append(f"DaemonSet {meta['name']} not yet observed")
            continue
        want, have = status.get("desiredNumberScheduled") or 0, status.get("numberReady") or 0
        if have < want:
            out.append(f"DaemonSet {meta['name']}: {have}/{want} Ready")
    for dep in deployments:
        want = (dep.get("spec") or {}).get("replicas", 1)
        have = (dep.get("status") or {}).get("readyReplicas") or 0
        if have < want:
            out.append(f"Deployment {dep['metadata']['name']}: {have}/{want} Ready")
    gpu_nodes = {n["metadata"]["name"] for n in nodes if _gpus(n) > 0}
    if not gpu_nodes:
        out.append("no GPU node")
    published = {(s.get("spec") or {}).get("nodeName") for s in slices}
    lacking = sorted(gpu_nodes - published)
    if lacking:
        shown = ", ".join(lacking[:3]) + (" ..." if len(lacking) > 3 else "")
        out.append(f"{len(lacking)} GPU node(s) without a ResourceSlice: {shown}")
    if registered is not None:
        unregistered = sorted(
            f"{node} ({driver})"
            for node, driver in {
                ((s.get("spec") or {}).get("nodeName"), (s.get("spec") or {}).get("driver"))
                for s in slices
            }
            if node in gpu_nodes and driver and driver not in registered.get(str(node), ())
        )
        if unregistered:
            shown = ", ".join(unregistered[:3]) + (" ..." if len(unregistered) > 3 else "")
            out.append(f"{len(unregistered)} kubelet(s) without the driver registered: {shown}")
    return out


Registered = Callable[[], Awaitable[Mapping[str, Sequence[str]]]]
"""Asks the sim which DRA drivers each node's kubelet has registered."""


async def _state(
    client: AsyncClient, namespace: str, registered: Registered | None = None
) -> list[str]:
    async def dicts(res: Any, **where: Any) -> list[dict[str, Any]]:
        return [obj.to_dict() async for obj in client.list(res, **where)]

    return missing(
        pods=await dicts(Pod, namespace=namespace),
        daemonsets=await dicts(DaemonSet, namespace=namespace),
        deployments=await dicts(Deployment, namespace=namespace),
        slices=await dicts(ResourceSlice),
        nodes=await dicts(Node),
        registered=None if registered is None else await registered(),
    )


async def wait_ready(
    client: AsyncClient, namespace: str, timeout: float, registered: Registered | None = None
) -> float:
    """Seconds until ``missing`` is empty for the driver in ``namespace`` (``registered``: the
    sim's answer of what each kubelet registered; None leaves that check out).

    Raises:
        TimeoutError: Not ready after ``timeout`` seconds; the message says what was missing.
    """
    t0 = time.monotonic()
    while lacking := await _state(client, namespace, registered):
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(
                f"driver in {namespace} not ready after {timeout:.0f}s: {'; '.join(lacking[:5])}"
            )
        # Five kinds of object across the cluster: a short re-check period is simpler and
        # cheaper here than five watches, and this wait is not part of any measured time.
        await asyncio.sleep(0.5)
    return time.monotonic() - t0
