"""Hand-made daemon pods (as the controller's DaemonSet and the plugin's CDI edits would make them)
and ways to look at what they did: their clique, IMEX's own view, their processes, their Events."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import (
    Container,
    EmptyDirVolumeSource,
    EnvVar,
    EnvVarSource,
    HostPathVolumeSource,
    HTTPGetAction,
    ObjectFieldSelector,
    PodSpec,
    Probe,
    Toleration,
    Volume,
    VolumeMount,
)
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.resources.core_v1 import Event, Node, Pod

import compute_domains
from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import Readiness
from compute_domains.plugin import basespec
from compute_domains.sim import driverroot
from tests.integration.helpers import wait_for

IMAGE = f"ghcr.io/compute-domains/compute-domains:{compute_domains.__version__}"
METRICS_PORT = 8082
"""The daemons' /metrics port (the controller's DaemonSet default)."""
NODES = ("gb200-r0-n00", "gb200-r0-n01", "gb200-r0-n02")


def _field(name: str, path: str) -> EnvVar:
    return EnvVar(name=name, valueFrom=EnvVarSource(fieldRef=ObjectFieldSelector(fieldPath=path)))


def _probe(failures: int) -> Probe:
    """The DaemonSet's probe: the daemon's own answer on its metrics port (no process)."""
    check = HTTPGetAction(path=names.DAEMON_HEALTH_PATH, port=METRICS_PORT)
    return Probe(httpGet=check, periodSeconds=1, timeoutSeconds=10, failureThreshold=failures)


def _imex_programs() -> list[Volume]:
    """The node driver root's IMEX programs, as the plugin's base CDI spec mounts them (our
    image has none; these pods are made by hand, without a claim of the base spec)."""
    root = driverroot.DRIVER_ROOT
    return [
        Volume(
            name=prog,
            hostPath=HostPathVolumeSource(path=f"{root}/{driverroot.BIN_DIR}/{prog}", type="File"),
        )
        for prog in basespec.IMEX_BINARIES
    ]


def daemon_pod(
    name: str,
    node: str,
    *,
    ns: str,
    cd: Any,
    clique_id: str,
    max_nodes: int,
    owner: Any = None,
    init: list[Container] | None = None,
    sidecars: list[Container] | None = None,
) -> Pod:
    """A daemon pod bound to ``node`` with the DaemonSet's env plus the CDI-injected env;
    ``owner`` (a ConfigMap) is its controller, so the CD's real DaemonSet never adopts it."""
    env = [
        EnvVar(name="LOG_VERBOSITY", value="info"),
        EnvVar(name="MAX_NODES_PER_IMEX_DOMAIN", value=str(max_nodes)),
        EnvVar(name="METRICS_PORT", value=str(METRICS_PORT)),
        _field("NODE_NAME", "spec.nodeName"),
        _field("POD_IP", "status.podIP"),
        _field("POD_UID", "metadata.uid"),
        _field("POD_NAME", "metadata.name"),
        _field("POD_NAMESPACE", "metadata.namespace"),
        EnvVar(name="CLIQUE_ID", value=clique_id),
        EnvVar(name="COMPUTE_DOMAIN_UUID", value=cd.metadata.uid),
        EnvVar(name="COMPUTE_DOMAIN_NAME", value=cd.metadata.name),
        EnvVar(name="COMPUTE_DOMAIN_NAMESPACE", value=cd.metadata.namespace),
    ]
    main = Container(
        name="compute-domain-daemon",
        image=IMAGE,
        command=["cdctl", "daemon", "run"],
        env=env,
        volumeMounts=[
            VolumeMount(name="imexd", mountPath="/imexd"),
            *(
                VolumeMount(name=prog, mountPath=f"/usr/bin/{prog}", readOnly=True)
                for prog in basespec.IMEX_BINARIES
            ),
        ],
        startupProbe=_probe(1200),
        readinessProbe=_probe(1),
    )
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace=ns,
            labels={names.COMPUTE_DOMAIN_LABEL: cd.metadata.uid},
            ownerReferences=None
            if owner is None
            else [
                OwnerReference(
                    apiVersion="v1",
                    kind="ConfigMap",
                    name=owner.metadata.name,
                    uid=owner.metadata.uid,
                    controller=True,
                )
            ],
        ),
        spec=PodSpec(
            nodeName=node,
            serviceAccountName=names.DAEMON_SERVICE_ACCOUNT,
            # As the DaemonSet: tolerate every taint (a daemon is never evicted by one).
            tolerations=[
                Toleration(operator="Exists", effect=e)
                for e in ("NoSchedule", "NoExecute", "PreferNoSchedule")
            ],
            terminationGracePeriodSeconds=30,
            initContainers=init,
            containers=[main, *(sidecars or [])],
            volumes=[Volume(name="imexd", emptyDir=EmptyDirVolumeSource()), *_imex_programs()],
        ),
    )


async def node_clique(client: AsyncClient, node: str) -> str:
    """The node's ``nvidia.com/gpu.clique`` label (what the plugin would inject as CLIQUE_ID)."""
    obj = await client.get(Node, node)
    return (obj.metadata.labels or {})[names.GPU_CLIQUE_LABEL]


def is_ready(pod: Pod) -> bool:
    status = pod.status
    return bool(
        status
        and status.phase == "Running"
        and any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
    )


async def wait_ready(client: AsyncClient, name: str, ns: str, timeout: float = 120) -> Pod:
    return await wait_for(client, Pod, name, is_ready, namespace=ns, timeout=timeout)


async def wait_clique(
    client: AsyncClient,
    ns: str,
    name: str,
    ok: Callable[[ComputeDomainClique], bool],
    timeout: float = 120,
) -> ComputeDomainClique:
    raw = await wait_for(
        client,
        ComputeDomainCliqueResource,
        name,
        lambda r: ok(ComputeDomainClique.from_resource(r)),
        namespace=ns,
        timeout=timeout,
    )
    return ComputeDomainClique.from_resource(raw)


def all_ready(nodes: set[str]) -> Callable[[ComputeDomainClique], bool]:
    """Predicate: exactly these nodes are listed, all Ready."""

    def ok(clique: ComputeDomainClique) -> bool:
        listed = {d.node_name for d in clique.daemons}
        return listed == nodes and all(d.status is Readiness.READY for d in clique.daemons)

    return ok


async def domain(sim_root: Path, ip: str) -> dict[str, Any]:
    """``nvidia-imex-ctl -N -j`` against the IMEX command service at ``ip`` (IMEX's own view).

    ``-N`` reads a daemon config (endpoint) and a nodes file (used only for the rows of a daemon
    that does not answer); the container's ``/imexd`` is not visible here, so a minimal pair is
    written for the query.
    """
    # The IMEX client of the simulator itself (nodes have it in their driver root only).
    ctl = [sys.executable, "-m", "compute_domains.sim.imex_main", "ctl"]
    with tempfile.TemporaryDirectory(prefix="imexq-") as tmp:
        nodes = Path(tmp) / "nodes.cfg"
        nodes.write_text("")
        cfg = Path(tmp) / "imexd.cfg"
        cfg.write_text(
            f"IMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP={ip}\nIMEX_CMD_PORT=50005\n"
            f"IMEX_NODE_CONFIG_FILE={nodes}\n"
        )
        argv = [*ctl, "-c", str(cfg), "-N", "-j", "-t", "5000"]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    if proc.returncode != 0:
        return {"status": "ERROR", "error": err.decode(), "nodes": {}}
    return json.loads(out)  # type: ignore[no-any-return]


async def wait_domain_up(
    sim_root: Path, ip: str, nodes: int, timeout: float = 90
) -> dict[str, Any]:
    """Ask IMEX until its domain is UP with ``nodes`` READY nodes (a one-shot tool: re-ask)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout
    report: dict[str, Any] = {}
    while loop.time() < until:
        report = await domain(sim_root, ip)
        ready = [n for n in report.get("nodes", {}).values() if n.get("status") == "READY"]
        if report.get("status") == "UP" and len(ready) == nodes:
            return report
        await asyncio.sleep(1)
    raise AssertionError(f"IMEX domain at {ip} not UP with {nodes} nodes: {report}")


def imex_pids(pod_name: str) -> list[int]:
    """Pids of the simulated nvidia-imex processes started by the daemon of pod ``pod_name``.

    The IMEX child inherits the daemon's environment, so ``POD_NAME`` identifies it.
    """
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"imex_main\0imex" in cmdline and f"POD_NAME={pod_name}\0".encode() in environ:
            found.append(int(proc.name))
    return found


async def wait_no_imex(pod_name: str, timeout: float = 15) -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout
    while imex_pids(pod_name):
        if loop.time() > until:
            raise AssertionError(f"nvidia-imex of {pod_name} still runs: {imex_pids(pod_name)}")
        await asyncio.sleep(0.2)


async def events_for(client: AsyncClient, ns: str, pod: str, reason: str) -> list[Event]:
    return [
        e
        async for e in client.list(Event, namespace=ns, fields={"involvedObject.name": pod})
        if e.reason == reason
    ]


async def log_of(client: AsyncClient, pod: str, ns: str, container: str | None = None) -> str:
    return "".join([line async for line in client.log(pod, namespace=ns, container=container)])


def workload_pod(name: str, node: str, *, ns: str, daemon_ip: str) -> Pod:
    """The seed's workload container (``mnnvl-workload`` on ubuntu) told where its daemon is."""
    env = [EnvVar(name="COMPUTE_DOMAIN_IMEX_ADDRESS", value=f"{daemon_ip}:50005")]
    ctr = Container(name="ctr", image="ubuntu:22.04", command=["mnnvl-workload"], env=env)
    return Pod(
        metadata=ObjectMeta(name=name, namespace=ns),
        spec=PodSpec(nodeName=node, containers=[ctr], terminationGracePeriodSeconds=5),
    )


async def wait_log(client: AsyncClient, pod: str, ns: str, until: str, timeout: float = 60) -> str:
    """The pod's log once ``until`` shows up in it (re-read every second)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    text = ""
    while loop.time() < deadline:
        try:
            text = await log_of(client, pod, ns)
        except ApiError:
            text = ""  # not started yet
        if until in text:
            return text
        await asyncio.sleep(1)
    raise AssertionError(f"{until!r} not in the log of {pod}:\n{text}")
