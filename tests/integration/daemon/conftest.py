"""Daemon integration fixtures: a 3-node sim, the CRDs, a driver namespace with the daemon's RBAC,
and the controller (in this process), which assigns the daemons' clique indices.

No kubelet plugin runs here: tests create daemon pods by hand, one per node, as the
controller's DaemonSet would (owned by a ConfigMap, so the CD's real DaemonSet never adopts
them), and set in their env what the plugin's CDI edits would inject (``CLIQUE_ID``,
``COMPUTE_DOMAIN_*``); ``/imexd`` is an emptyDir.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.models.rbac_v1 import PolicyRule, RoleRef, Subject
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Node, Pod, ServiceAccount
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding

from compute_domains import controller
from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.infra import kube
from compute_domains.sim import lifecycle, state, toolchain, topology
from tests.conftest import keep_sims
from tests.integration.daemon.pods import IMAGE, NODES
from tests.integration.helpers import wait_for

CRD_DIR = Path(__file__).resolve().parents[3] / "deploy/helm/compute-domains/crds"

DAEMON_RULES = [
    # Label our own pod, and follow its readiness.
    PolicyRule(apiGroups=[""], resources=["pods"], verbs=["get", "list", "watch", "patch"]),
    # Events on our pod (clique full, IMEX restarted).
    PolicyRule(apiGroups=[""], resources=["events"], verbs=["create", "patch"]),
    # Our clique: follow it, report our readiness, remove our entry (the controller adds it).
    PolicyRule(
        apiGroups=[names.GROUP],
        resources=[names.CLIQUE_PLURAL],
        verbs=["get", "list", "watch", "patch"],
    ),
]
"""What the daemon needs in the driver namespace (the intent of the chart's daemon Role)."""


@pytest.fixture(scope="module")
def daemon_sim(toolset: toolchain.Toolset) -> Iterator[state.SimPaths]:
    # Not under /tmp: a container's private /tmp would hide the stand-ins (nvidia-imex) that
    # the sim shows from <sim home>/sims/<name>/bin. Short path: unix sockets (108 bytes).
    home = Path(tempfile.mkdtemp(prefix="cdd-", dir="/var/tmp"))
    paths = state.SimPaths(home, "daemon")
    started = lifecycle.start(
        paths,
        toolset.bin_dir,
        die_with_parent=True,
        shape=topology.Shape(racks=1, nodes_per_rack=3),
    )
    yield paths
    lifecycle.stop(paths, process=started.process, remove=not keep_sims())
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
async def admin(daemon_sim: state.SimPaths) -> AsyncIterator[AsyncClient]:
    c = kube.client(kube.KubeSettings(kubeconfig=daemon_sim.kubeconfig, field_manager="tests"))
    yield c
    await c.close()


def _node_ready(node: Node) -> bool:
    conditions = node.status.conditions if node.status else None
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions or [])
    return ready and not any(t.effect == "NoExecute" for t in node.spec.taints or [])


async def _install_crds(client: AsyncClient) -> None:
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for crd in codecs.load_all_yaml(path.read_text()):
            await client.apply(crd, field_manager="tests", force=True)
            await wait_for(
                client,
                CustomResourceDefinition,
                crd.metadata.name,
                lambda c: any(
                    x.type == "Established" and x.status == "True"
                    for x in (c.status.conditions or [])
                ),
            )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


async def _dump(client: AsyncClient, ns: str) -> None:
    """On failure: pods, Events, cliques and daemon logs of the namespace (printed, captured)."""
    print(f"===== diagnostics of namespace {ns} =====")
    async for pod in client.list(Pod, namespace=ns):
        status = pod.status
        conds = {c.type: c.status for c in (status.conditions or [])} if status else {}
        print(
            f"pod {pod.metadata.name} node={pod.spec.nodeName} phase={status and status.phase}"
            f" ip={status and status.podIP} conditions={conds}"
        )
        for c in pod.spec.containers:
            with contextlib.suppress(ApiError):
                text = "".join(
                    [x async for x in client.log(pod.metadata.name, namespace=ns, container=c.name)]
                )
                cut = text if len(text) < 9000 else f"{text[:3000]}\n[...]\n{text[-6000:]}"
                print(f"----- log {pod.metadata.name}/{c.name} -----\n{cut}")
    async for ev in client.list(Event, namespace=ns):
        print(f"event {ev.involvedObject.name} {ev.type} {ev.reason} x{ev.count}: {ev.message}")
    async for raw in client.list(ComputeDomainCliqueResource, namespace=ns):
        print(f"clique {raw.metadata.name}: {dict(raw).get('daemons')}")


@pytest.fixture
async def driver_ns(admin: AsyncClient, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A driver namespace with the daemon ServiceAccount bound to the daemon Role."""
    await _install_crds(admin)
    for node in NODES:  # pods are bound by nodeName: their node must be Ready (untainted)
        await wait_for(admin, Node, node, _node_ready, timeout=120)
    ns = f"cd-daemon-{uuid.uuid4().hex[:6]}"
    await admin.create(Namespace(metadata=ObjectMeta(name=ns)))
    await wait_for(admin, ServiceAccount, "default", lambda _: True, namespace=ns)
    sa = names.DAEMON_SERVICE_ACCOUNT
    await admin.create(ServiceAccount(metadata=ObjectMeta(name=sa, namespace=ns)))
    role = Role(metadata=ObjectMeta(name="cd-daemon", namespace=ns), rules=DAEMON_RULES)
    await admin.create(role)
    await admin.create(
        RoleBinding(
            metadata=ObjectMeta(name="cd-daemon", namespace=ns),
            roleRef=RoleRef(apiGroup="rbac.authorization.k8s.io", kind="Role", name="cd-daemon"),
            subjects=[Subject(kind="ServiceAccount", name=sa, namespace=ns)],
        )
    )
    yield ns
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        await _dump(admin, ns)
    try:
        await admin.delete(Namespace, ns)
    except ApiError as err:
        if err.status.code != 404:
            raise


async def new_compute_domain(admin: AsyncClient, ns: str) -> Any:
    """A ComputeDomain in ``ns`` (no controller runs: only its UID and name matter to the
    daemons)."""
    body = ComputeDomainResource.from_dict(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.COMPUTE_DOMAIN_KIND,
            "metadata": {"name": f"cd-{uuid.uuid4().hex[:4]}", "namespace": ns},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "rct"}}},
        }
    )
    return await admin.create(body)


@pytest.fixture
async def compute_domain(admin: AsyncClient, driver_ns: str) -> Any:
    """A ComputeDomain (``new_compute_domain``) in the driver namespace."""
    return await new_compute_domain(admin, driver_ns)


@pytest.fixture
async def pod_owner(admin: AsyncClient, driver_ns: str) -> Any:
    """The ConfigMap that owns the hand-made daemon pods (``pods.daemon_pod(owner=...)``)."""
    return await admin.create(
        ConfigMap.from_dict({"metadata": {"name": "daemon-pod-owner", "namespace": driver_ns}})
    )


StartController = Callable[[int], Awaitable[controller.Controller]]


@pytest.fixture
async def start_controller(
    daemon_sim: state.SimPaths, driver_ns: str
) -> AsyncIterator[StartController]:
    """``await start_controller(max_nodes)``: the controller, leading (cancelled at teardown)."""
    running: list[asyncio.Task[None]] = []

    async def start(max_nodes: int) -> controller.Controller:
        settings = controller.ControllerSettings(
            namespace=driver_ns,
            kube=kube.KubeSettings(kubeconfig=daemon_sim.kubeconfig, field_manager="controller"),
            daemon=controller.DaemonSettings(image=IMAGE, max_nodes_per_imex_domain=max_nodes),
            metrics_port=0,
        )
        instance = controller.Controller(settings)
        task = asyncio.create_task(instance.run(), name="controller")
        running.append(task)
        leading = asyncio.create_task(instance.leading.wait())
        done, _ = await asyncio.wait({leading, task}, timeout=90, return_when="FIRST_COMPLETED")
        leading.cancel()
        if task in done:
            task.result()
        assert leading in done, "the controller did not start leading within 90 s"
        return instance

    yield start
    for task in running:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
