"""Small building blocks of the acceptance modules: upstream's helpers.sh in Python.

``upgrade`` is upstream's ``iupgrade_wait`` (``helm upgrade --install --wait`` with changed
values, then every driver pod Ready); ``within`` asserts an upstream time limit; the object
builders make upstream's ``channel-injection.yaml`` shapes (a ComputeDomain, a pod that lists
its channels); ``leftovers`` lists what of any ComputeDomain is still in the cluster or on a
node after everything was deleted.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate, ResourceSlice
from prometheus_client.parser import text_string_to_metric_families

from compute_domains.agent.config import SHARED_FOLDER
from compute_domains.api import clique, computedomain, names, nodemark, sharedimex
from compute_domains.cli import options
from compute_domains.containers import procs
from compute_domains.plugin import checkpoint, checkpointfile
from compute_domains.sim import driver, driverroot, state
from tests.e2e.conftest import DRIVER_NS, suite_values

# The chart's default names are NVIDIA's (compat.nvidiaNames), whatever the release is called.
CONTROLLER_DEPLOYMENT = "nvidia-dra-driver-gpu-controller"
PLUGIN_DAEMONSET = "nvidia-dra-driver-gpu-kubelet-plugin"
LIST_CHANNELS = "ls -la /dev/nvidia-caps-imex-channels; sleep 3600"
"""The command of upstream's channel-injection pods."""


def suite_setting(key: str, default: str) -> str:
    """The value of chart key ``key`` every install of this suite gets: the last ``key=...`` of
    ``CD_E2E_SET`` (``conftest.suite_values``), else ``default`` (the chart's)."""
    found = default
    for item in suite_values():
        name, _, value = item.partition("=")
        if name.strip() == key:
            found = value.strip()
    return found


def resident_agents() -> bool:
    """Whether this suite runs with resident IMEX agents (``imex.agents=resident``): no per-CD
    DaemonSet, the node's agent pod serves a per-domain CD (decision 0014)."""
    return suite_setting("imex.agents", "perComputeDomain") == "resident"


def per_clique() -> bool:
    """Whether this suite's CDs are in the per-clique scope (``imex.scope=perClique``): one
    shared IMEX per clique, each CD its own channel from 1 up, no daemon pod labelled for a CD
    (decision 0015)."""
    return suite_setting("imex.scope", "perDomain") == "perClique"


async def expected_channel(admin: AsyncClient, domain_uid: str, node: str) -> int:
    """The one channel a workload pod of CD ``domain_uid`` on ``node`` must see: 0 in the
    per-domain scope (NVIDIA's), else the CD's number in the shared registry of the node's
    clique (never 0; the registry's ``compute-domains/channel.<uid>``)."""
    if not per_clique():
        return 0
    found = await admin.get(Node, node)
    clique_id = (found.metadata.labels or {}).get(names.GPU_CLIQUE_LABEL, "")  # type: ignore[union-attr]
    assert clique_id, f"node {node} has no clique ID: no per-clique channel"
    reg = await admin.get(
        clique.ComputeDomainCliqueResource, sharedimex.registry_name(clique_id), namespace=DRIVER_NS
    )
    numbers = sharedimex.channels(reg.metadata.annotations if reg.metadata else None)
    assert domain_uid in numbers, f"CD {domain_uid} has no channel in {clique_id}: {numbers}"
    assert numbers[domain_uid] >= sharedimex.FIRST_CHANNEL, numbers
    return numbers[domain_uid]


async def cd_channel(admin: AsyncClient, cd: str, node: str, namespace: str = "default") -> int:
    """:func:`expected_channel` of CD ``namespace/cd`` (by name) on ``node``."""
    domain = await admin.get(computedomain.ComputeDomainResource, cd, namespace=namespace)
    return await expected_channel(admin, str(domain.metadata.uid), node)  # type: ignore[union-attr]


async def pod_channel(admin: AsyncClient, pod: str, cd: str, namespace: str = "default") -> str:
    """``channel<n>``: the channel device pod ``pod`` of CD ``cd`` must see in its container
    (:func:`cd_channel` on the node the pod runs on)."""
    found = await admin.get(Pod, pod, namespace=namespace)
    node = str(found.spec.nodeName)  # type: ignore[union-attr]
    return f"channel{await cd_channel(admin, cd, node, namespace)}"


def imex_domain_nodes(cd_nodes: int, clique_nodes: int) -> int:
    """How many nodes a workload's IMEX domain has READY: the CD's own nodes of the pod's clique
    in the per-domain scope; every node of the clique in the per-clique scope, whose shared IMEX
    runs on each from its plugin's start, CD or not (decision 0015)."""
    return clique_nodes if per_clique() else cd_nodes


async def cd_cliques(admin: AsyncClient, namespace: str = "*") -> list[Any]:
    """Every ComputeDomainClique that belongs to some CD: in the per-clique scope a clique's
    shared registry counts only while it holds a CD's channel (the registry itself stays for
    good, as its shared IMEX does: decision 0015)."""
    return [
        c
        async for c in admin.list(clique.ComputeDomainCliqueResource, namespace=namespace)
        if not (per_clique() and sharedimex.is_registry_name(str(c.metadata.name)))  # type: ignore[union-attr]
        or sharedimex.channels(c.metadata.annotations)  # type: ignore[union-attr]
    ]


async def shared_entries(admin: AsyncClient) -> dict[str, tuple[int, str]]:
    """Per-clique scope: node -> (index, status) of its entry in its clique's shared registry
    (``shared-imex.<cliqueID>``, written by the node's resident agent; decision 0015)."""
    return {
        str(d["nodeName"]): (int(d["index"]), str(d["status"]))
        async for c in admin.list(clique.ComputeDomainCliqueResource, namespace=DRIVER_NS)
        if sharedimex.is_registry_name(str(c.metadata.name))  # type: ignore[union-attr]
        for d in c.to_dict().get("daemons") or []  # type: ignore[no-untyped-call]
    }


def _tool(sim: state.SimPaths, tool: str, *args: str, timeout: float = 300) -> str:
    bins = Path(state.read_state(sim).bin_dir)  # type: ignore[union-attr]
    res = subprocess.run(
        [str(bins / tool), "--kubeconfig", str(sim.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if res.returncode != 0:
        raise AssertionError(
            f"{tool} {' '.join(args)} failed ({res.returncode}):\n{res.stdout}{res.stderr}"
        )
    return res.stdout


def kubectl(sim: state.SimPaths, *args: str, timeout: float = 300) -> str:
    """Run the sim's kubectl; a non-zero exit fails the test with its output."""
    return _tool(sim, "kubectl", *args, timeout=timeout)


def helm(sim: state.SimPaths, *args: str, timeout: float = 600) -> str:
    """Run the sim's helm; a non-zero exit fails the test with its output."""
    return _tool(sim, "helm", *args, timeout=timeout)


def upgrade(sim: state.SimPaths, *values: str) -> None:
    """Upstream's ``iupgrade_wait``: reinstall the chart with ``values`` and wait for its pods.

    The simulator-only NVML value is always set (the sim installed the chart with it).
    """
    argv = [
        "upgrade",
        "--install",
        driver.RELEASE,
        str(options.chart_dir()),
        "--namespace",
        DRIVER_NS,
        "--create-namespace",
        "--wait",
        "--timeout",
        "300s",
        "--set",
        f"nvidiaDriverRoot={driverroot.DRIVER_ROOT}",
    ]
    for value in (*suite_values(), *values):
        argv += ["--set", value]
    _tool(sim, "helm", *argv, timeout=360)
    # helm's --wait lets a one-node DaemonSet (maxUnavailable 1) and a Deployment at minimum
    # availability through; upstream then waits for every plugin and controller pod Ready.
    for workload in (
        f"deployment/{CONTROLLER_DEPLOYMENT}",
        f"daemonset/{PLUGIN_DAEMONSET}",
    ):
        try:
            kubectl(
                sim, "rollout", "status", "-n", DRIVER_NS, workload, "--timeout=300s", timeout=330
            )
        except AssertionError as err:
            pods = kubectl(sim, "get", "pods", "-n", DRIVER_NS, "-o", "wide")
            raise AssertionError(f"{err}\n{pods}") from None


def uninstall(sim: state.SimPaths) -> None:
    """``helm uninstall --wait``: the chart's pods are gone; CRDs and node files stay."""
    _tool(
        sim,
        "helm",
        "uninstall",
        driver.RELEASE,
        "--namespace",
        DRIVER_NS,
        "--wait",
        "--timeout",
        "120s",
        timeout=180,
    )


async def within(
    seconds: float, check: Callable[[], Awaitable[Any]], what: str, interval: float = 0.2
) -> float:
    """Poll ``check`` until truthy; fail when ``seconds`` (an upstream limit) pass first.
    Returns how long it took."""
    t0 = time.monotonic()
    last: Any = None
    while not (last := await check()):
        if time.monotonic() - t0 > seconds:
            raise AssertionError(f"{what} not within {seconds:.0f}s (last: {last!r})")
        await asyncio.sleep(interval)
    return time.monotonic() - t0


def ready(p: Pod) -> bool:
    return bool(
        p.status
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    )


async def pod_ready(admin: AsyncClient, name: str, namespace: str = "default") -> bool:
    try:
        return ready(await admin.get(Pod, name, namespace=namespace))
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise


async def gone(admin: AsyncClient, kind: Any, name: str, namespace: str | None = "default") -> bool:
    try:
        await admin.get(kind, name, namespace=namespace)
    except ApiError as err:
        return err.status.code == 404
    return False


async def formed(admin: AsyncClient, cd: str, n: int, job: str = "job") -> bool:
    """Whether CD ``cd`` (namespace default) is Ready with ``n`` Ready nodes and the ``n`` pods
    of its workload Deployment ``job`` (label ``job=<job>``) run Ready."""
    st = await cd_status(admin, cd)
    nodes = st.get("nodes") or []
    pods = [p async for p in admin.list(Pod, namespace="default", labels={"job": job})]
    return (
        st.get("status") == "Ready"
        and len(nodes) == n
        and all(e["status"] == "Ready" for e in nodes)
        and len(pods) == n
        and all(ready(p) for p in pods)
    )


async def marked_nodes(admin: AsyncClient) -> list[Node]:
    """The Nodes marked for any ComputeDomain, in either form of the mark (the label, or the
    annotation with ``imex.nodeMark=annotation``; ``api.nodemark``)."""
    return [n async for n in admin.list(Node) if nodemark.domain_of(n.metadata)]


async def create_cd(
    admin: AsyncClient,
    name: str,
    *,
    num_nodes: int = 0,
    mode: str | None = None,
    namespace: str = "default",
) -> str:
    """Create a ComputeDomain whose channel template is ``<name>-rct``; return its UID."""
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": f"{name}-rct"}}
    if mode is not None:
        channel["allocationMode"] = mode
    obj = await admin.create(
        computedomain.ComputeDomainResource(
            metadata=ObjectMeta(name=name, namespace=namespace),
            spec={"numNodes": num_nodes, "channel": channel},
        )
    )
    return str(obj.metadata.uid)  # type: ignore[union-attr]


async def cd_status(admin: AsyncClient, name: str, namespace: str = "default") -> dict[str, Any]:
    obj = await admin.get(computedomain.ComputeDomainResource, name, namespace=namespace)
    doc: dict[str, Any] = obj.to_dict()  # type: ignore[no-untyped-call]
    return doc.get("status") or {}


def channel_pod(
    name: str,
    template: str,
    *,
    command: str = LIST_CHANNELS,
    node: str | None = None,
    gpus: int | None = None,
    namespace: str = "default",
) -> Pod:
    """A pod whose one container consumes a claim from ``template`` (upstream's shape)."""
    resources: dict[str, Any] = {"claims": [{"name": "cd"}]}
    if gpus is not None:
        resources["limits"] = {"nvidia.com/gpu": gpus}
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 2,
        "resourceClaims": [{"name": "cd", "resourceClaimTemplateName": template}],
        "containers": [
            {
                "name": "ctr",
                "image": "ubuntu:22.04",
                "command": ["sh", "-c", command],
                "resources": resources,
            }
        ],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return cast(
        Pod, Pod.from_dict({"metadata": {"name": name, "namespace": namespace}, "spec": spec})
    )


def workload_deployment(
    name: str, template: str, replicas: int, *, command: str | None = None, job: str = ""
) -> Deployment:
    """A multi-node job: ``replicas`` pods labelled ``job`` (default ``name``), one per node
    (4 GPUs each), each with a channel claim from ``template``; they run ``mnnvl-workload``,
    or ``command`` under ``sh -c``."""
    spec = channel_pod(name, template, command=command or "", gpus=4).to_dict()["spec"]
    if command is None:
        spec["containers"][0]["command"] = ["mnnvl-workload"]
    spec["terminationGracePeriodSeconds"] = 5
    labels = {"job": job or name}
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


async def daemon_pods(admin: AsyncClient, domain_uid: str | None) -> list[Pod]:
    """The CD's daemon pods (every CD's when ``domain_uid`` is None), terminating ones included."""
    return [
        p
        async for p in admin.list(
            Pod, namespace=DRIVER_NS, labels={names.COMPUTE_DOMAIN_LABEL: domain_uid}
        )
    ]


async def log_of(
    admin: AsyncClient, pod: str, namespace: str = "default", container: str | None = None
) -> str:
    """``kubectl logs``: everything the container wrote so far."""
    return "".join(
        [line async for line in admin.log(pod, namespace=namespace, container=container)]
    )


async def component_logs(admin: AsyncClient, component: str) -> dict[str, str]:
    """Pod name → log of every driver pod of ``component`` (``controller``/``kubelet-plugin``)."""
    pods = [
        p
        async for p in admin.list(
            Pod, namespace=DRIVER_NS, labels={"app.kubernetes.io/component": component}
        )
    ]
    return {
        str(p.metadata.name): await log_of(admin, str(p.metadata.name), DRIVER_NS)
        for p in pods
        if p.metadata and not p.metadata.deletionTimestamp
    }


async def log_with(
    admin: AsyncClient, pod: str, texts: tuple[str, ...], timeout: float = 30
) -> str:
    """The container's log once it holds every one of ``texts`` (it may lag pod readiness)."""
    logs = ""

    async def has_all() -> bool:
        nonlocal logs
        logs = await log_of(admin, pod)
        return all(t in logs for t in texts)

    try:
        await within(timeout, has_all, f"{texts} in the log of {pod}")
    except AssertionError as err:
        raise AssertionError(f"{err}; log:\n{logs[-3000:]}") from None
    return logs


async def controller_leader(admin: AsyncClient) -> Pod | None:
    """The live controller pod holding the Lease (its identity is the pod name, with a
    per-process suffix in some versions); None while no such pod leads."""
    lease = await admin.get(Lease, f"{driver.RELEASE}-controller", namespace=DRIVER_NS)
    holder = str((lease.spec and lease.spec.holderIdentity) or "")
    async for pod in admin.list(
        Pod, namespace=DRIVER_NS, labels={"app.kubernetes.io/component": "controller"}
    ):
        name = str(pod.metadata.name)  # type: ignore[union-attr]
        if not pod.metadata.deletionTimestamp and (  # type: ignore[union-attr]
            holder == name or holder.startswith(f"{name}-")
        ):
            return pod
    return None


async def leader_node(admin: AsyncClient) -> str:
    """The node the leading controller replica runs on ("" while none leads). A power-cut
    drill stops another node: the chart's default affinity lets the controller run on a GPU
    node (NVIDIA's requires a control-plane node), and a controller that loses its own node
    writes no status until a standby or its rescheduled pod leads."""
    pod = await controller_leader(admin)
    return str(pod.spec.nodeName or "") if pod is not None and pod.spec is not None else ""


async def reconciles(pod: Pod) -> int:
    """How many reconciles the controller ``pod`` finished, from its ``/metrics`` (served on
    the pod IP, which is a loopback address of the simulated node)."""
    assert pod.spec is not None and pod.status is not None and pod.status.podIP
    port = next(
        p.containerPort for c in pod.spec.containers for p in c.ports or [] if p.name == "metrics"
    )
    try:
        async with httpx.AsyncClient() as http:
            page = (await http.get(f"http://{pod.status.podIP}:{port}/metrics", timeout=10)).text
    except httpx.TransportError:
        return 0  # a pod of a new term: its endpoint may still be binding
    return sum(
        int(sample.value)
        for family in text_string_to_metric_families(page)
        if family.name == "compute_domains_controller_reconcile_duration_seconds"
        for sample in family.samples
        if sample.name.endswith("_count")
    )


def _descendants(pid: int) -> list[int]:
    """Every live descendant process of ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[-1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def component_processes(paths: state.SimPaths) -> list[str]:
    """Command lines of the sim's processes that run a kubelet plugin, a daemon, IMEX or the
    workload stand-in: there are such processes on process-mode nodes and none on virtual ones
    (they are tasks)."""
    recorded = state.read_state(paths)
    assert recorded is not None
    lines = [" ".join(procs.pid_cmdline(p)) for p in _descendants(recorded.supervisor_pid)]
    marks = (
        "plugin run",
        "daemon run",
        "agent run",
        "imex_main imex",
        "compute_domains.sim.workload",
    )
    return [line for line in lines if any(m in line for m in marks)]


def imex_processes(paths: state.SimPaths) -> dict[str, tuple[int, str]]:
    """Node → (pid, start time in clock ticks) of each running ``nvidia-imex`` stand-in of the
    sim (process-mode nodes): a restarted IMEX has another pair. The node is the ``NODE_NAME``
    its daemon container gave it (ours and NVIDIA's daemon pods both set it)."""
    recorded = state.read_state(paths)
    assert recorded is not None
    found: dict[str, tuple[int, str]] = {}
    for pid in _descendants(recorded.supervisor_pid):
        proc = Path("/proc") / str(pid)
        try:
            if "imex_main imex" not in " ".join(procs.pid_cmdline(pid)):
                continue
            env = dict(
                item.split("=", 1)
                for item in (proc / "environ").read_text().split("\0")
                if "=" in item
            )
            started = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[19]
        except (OSError, IndexError):
            continue  # it ended meanwhile
        node = env.get("NODE_NAME", "")
        assert node not in found, f"two IMEX processes on {node}: {found[node][0]} and {pid}"
        found[node] = (pid, started)
    return found


def nodes_mode(paths: state.SimPaths) -> str:
    """How the sim's nodes run their containers (its state record)."""
    recorded = state.read_state(paths)
    assert recorded is not None
    return str(recorded.extra.get("nodesMode", "process"))


def _names(objs: list[Any], what: str) -> list[str]:
    return [
        f"{what} {o.metadata.namespace or ''}/{o.metadata.name}".replace(" /", " ") for o in objs
    ]


def node_leftovers(sim: state.SimPaths, node: str) -> list[str]:
    """What prepared claims left on one node: CDI claim specs, checkpoint entries that still
    hold devices (an unprepared tombstone is kept on purpose), per-CD folders."""
    root = sim.node_root(node)
    plugin_dir = root / "var/lib/kubelet/plugins" / names.DRIVER_NAME
    left = [f"CDI spec {f.name} on {node}" for f in (root / "var/run/cdi").glob("*claim*")]
    found = checkpointfile.load(plugin_dir / checkpointfile.FILE_NAME)
    left += [
        f"checkpoint entry {e.namespace}/{e.name} ({e.state}) on {node}"
        for e in (found.claims.values() if found else ())
        if e.state != checkpoint.ClaimState.UNPREPARED
    ]
    left += [
        f"folder domains/{d.name} on {node}"
        for d in (plugin_dir / "domains").glob("*")
        # The clique's shared IMEX folder is the node's, not a CD's (kept for good, 0015).
        if not (per_clique() and d.name == SHARED_FOLDER)
    ]
    return left


async def leftovers(admin: AsyncClient, sim: state.SimPaths, nodes: list[str]) -> list[str]:
    """Everything of any ComputeDomain still there: the CDs, their daemon pods, DaemonSets,
    cliques, channel templates, node labels, every ResourceClaim, and on ``nodes`` what
    ``node_leftovers`` finds. Empty once a deleted domain and its workload are wholly gone."""
    cd_label = {names.COMPUTE_DOMAIN_LABEL: None}
    left = _names(await daemon_pods(admin, None), "daemon pod")
    left += _names(
        [d async for d in admin.list(DaemonSet, namespace="*", labels=cd_label)], "DaemonSet"
    )
    cliques = [c async for c in admin.list(clique.ComputeDomainCliqueResource, namespace="*")]
    if per_clique():
        # A clique's shared registry outlives every CD by design (the shared IMEX runs for
        # good, decision 0015); no CD's channel may be left on it.
        shared = [c for c in cliques if sharedimex.is_registry_name(str(c.metadata.name))]  # type: ignore[union-attr]
        cliques = [c for c in cliques if c not in shared]
        left += [
            f"channel of CD {uid} on registry {c.metadata.name}"  # type: ignore[union-attr]
            for c in shared
            for uid in sharedimex.channels(c.metadata.annotations)  # type: ignore[union-attr]
        ]
    left += _names(cliques, "clique")
    left += _names(
        [t async for t in admin.list(ResourceClaimTemplate, namespace="*", labels=cd_label)],
        "template",
    )
    left += _names([c async for c in admin.list(ResourceClaim, namespace="*")], "claim")
    left += _names(
        [c async for c in admin.list(computedomain.ComputeDomainResource, namespace="*")],
        "ComputeDomain",
    )
    left += [f"label on node {n.metadata.name}" async for n in admin.list(Node, labels=cd_label)]  # type: ignore[union-attr]
    left += [
        f"channel of CD {uid} on node {n.metadata.name}"  # type: ignore[union-attr]
        async for n in admin.list(Node)
        for uid in sharedimex.channels(n.metadata.annotations)  # type: ignore[union-attr]
    ]
    return left + [x for n in nodes for x in node_leftovers(sim, n)]


async def slice_holders(admin: AsyncClient) -> dict[str, set[str]]:
    """Node → the holders its channel slots show in our driver's slices (empty: free). The
    scheduler goes by these, which follow the node marks after the plugin's republish."""
    out: dict[str, set[str]] = {}
    async for found in admin.list(ResourceSlice, fields={"spec.driver": names.DRIVER_NAME}):
        doc = found.to_dict()["spec"]
        held = out.setdefault(str(doc.get("nodeName", "")), set())
        for device in doc.get("devices") or []:
            value = (device.get("attributes") or {}).get(names.CHANNEL_HOLDER_ATTRIBUTE, {})
            if value.get("string"):
                held.add(str(value["string"]))
    return out
