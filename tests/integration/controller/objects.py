"""Hand-made cluster objects for controller tests: CDs, Nodes with heartbeats, daemon pods, cliques,
workload claims.

No kubelet, plugin, scheduler or daemon runs in these tests: a test plays their parts by writing
the objects they would write (a Node that stays Ready while its Lease is renewed, a daemon pod
bound to a node with a Ready status, a clique entry, a workload claim allocated to a node and
reserved for a pod bound there). Daemon pods are owned (as controller) by a ConfigMap so the
real DaemonSet controller never adopts or deletes them; workload pods have no owner and never
run (no kubelet), so the claim controller keeps their reservations.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod, ServiceAccount
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from compute_domains.api import agentpods, names
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource, Readiness
from tests.integration.helpers import wait_for

CRD_DIR = Path(__file__).resolve().parents[3] / "deploy/helm/compute-domains/crds"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def install_crds(client: AsyncClient) -> None:
    """Apply the chart's CRDs (idempotent) and wait until they are served."""
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


async def namespace(client: AsyncClient, name: str) -> None:
    """Create a namespace and wait for its default ServiceAccount (pods need it)."""
    await client.create(Namespace.from_dict({"metadata": {"name": name}}))
    await wait_for(client, ServiceAccount, "default", lambda _sa: True, namespace=name)


def cd_body(name: str, ns: str, template: str, *, num_nodes: int = 0, mode: str = "Single") -> Any:
    return ComputeDomainResource.from_dict(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.COMPUTE_DOMAIN_KIND,
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "numNodes": num_nodes,
                "channel": {"resourceClaimTemplate": {"name": template}, "allocationMode": mode},
            },
        }
    )


async def create_cd(client: AsyncClient, name: str, ns: str, template: str, **kw: Any) -> Any:
    return await client.create(cd_body(name, ns, template, **kw))


class FakeNode:
    """A Node kept Ready by renewing its Lease, as a kubelet would; ``stop`` loses it."""

    def __init__(self, client: AsyncClient, name: str, labels: dict[str, str] | None = None):
        self.client = client
        self.name = name
        self.labels = labels or {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> FakeNode:
        labels = {"kubernetes.io/hostname": self.name, **self.labels}
        await self.client.create(
            Node.from_dict({"metadata": {"name": self.name, "labels": labels}})
        )
        status = {
            "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "test node",
                    "lastHeartbeatTime": now(),
                    "lastTransitionTime": now(),
                }
            ],
        }
        await self.client.patch(Node.Status, self.name, {"status": status})
        lease = {
            "metadata": {"name": self.name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": now()},
        }
        with contextlib.suppress(ApiError):
            await self.client.delete(Lease, self.name, namespace="kube-node-lease")
        await self.client.create(Lease.from_dict(lease))
        self._task = asyncio.create_task(self._beat(), name=f"heartbeat-{self.name}")
        return self

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            with contextlib.suppress(ApiError):
                await self.client.patch(
                    Lease, self.name, {"spec": {"renewTime": now()}}, namespace="kube-node-lease"
                )

    async def stop_heartbeat(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def delete(self) -> None:
        await self.stop_heartbeat()
        with contextlib.suppress(ApiError):
            await self.client.delete(Node, self.name)
        with contextlib.suppress(ApiError):
            await self.client.delete(Lease, self.name, namespace="kube-node-lease")


async def owner_ref(client: AsyncClient, ns: str) -> dict[str, Any]:
    """The controller owner reference of a hand-made pod (``pod_owner``)."""
    owner = await pod_owner(client, ns)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
        "controller": True,
    }


async def pod_owner(client: AsyncClient, ns: str) -> Any:
    """A ConfigMap that owns hand-made daemon pods (so no DaemonSet adopts them)."""
    try:
        return await client.get(ConfigMap, "daemon-pod-owner", namespace=ns)
    except ApiError:
        pass
    try:
        return await client.create(
            ConfigMap.from_dict({"metadata": {"name": "daemon-pod-owner", "namespace": ns}})
        )
    except ApiError as err:
        # Callers make pods concurrently: another one created it between our get and create.
        if err.status.code != 409:
            raise
        return await client.get(ConfigMap, "daemon-pod-owner", namespace=ns)


async def daemon_pod(
    client: AsyncClient,
    ns: str,
    *,
    domain_uid: str,
    node: str,
    ip: str,
    clique_id: str | None,
    ready: bool,
    name: str | None = None,
) -> Pod:
    """A daemon pod of CD ``domain_uid`` bound to ``node``, Running, with the given readiness."""
    ref = await owner_ref(client, ns)
    labels = {names.COMPUTE_DOMAIN_LABEL: domain_uid}
    if clique_id is not None:
        labels[names.CLIQUE_ID_LABEL] = clique_id
    name = name or f"daemon-{domain_uid[:8]}-{node}"
    body = {
        "metadata": {"name": name, "namespace": ns, "labels": labels, "ownerReferences": [ref]},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "compute-domain-daemon", "image": "registry.k8s.io/pause:3.10"}
            ],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    await client.create(Pod.from_dict(body))
    await set_pod_ready(client, ns, name, ip=ip, ready=ready)
    return await client.get(Pod, name, namespace=ns)


async def agent_pod(
    client: AsyncClient,
    ns: str,
    *,
    node: str,
    ip: str,
    ready: bool,
    restarts: int = 0,
    name: str = "",
) -> str:
    """A resident agent's pod on ``node`` (label ``app.kubernetes.io/component=imex-agent``),
    Running with ``ip`` and the given readiness and restart count (created when missing;
    ``name`` defaults to ``agent-<node>``); returns its name."""
    name = name or f"agent-{node}"
    try:
        await client.get(Pod, name, namespace=ns)
    except ApiError as err:
        if err.status.code != 404:
            raise
        ref = await owner_ref(client, ns)
        body = {
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": dict(agentpods.LABELS),
                "ownerReferences": [ref],
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "imex-agent", "image": "registry.k8s.io/pause:3.10"}],
                "tolerations": [{"operator": "Exists"}],
            },
        }
        await client.create(Pod.from_dict(body))
    await set_pod_ready(client, ns, name, ip=ip, ready=ready)
    if restarts:
        state = {"running": {"startedAt": now()}}
        container = {
            "name": "imex-agent",
            "image": "registry.k8s.io/pause:3.10",
            "imageID": "",
            "ready": ready,
            "restartCount": restarts,
            "state": state,
        }
        patch = {"status": {"containerStatuses": [container]}}
        await client.patch(Pod.Status, name, patch, namespace=ns)
    return name


async def set_pod_ready(client: AsyncClient, ns: str, name: str, *, ip: str, ready: bool) -> None:
    flag = "True" if ready else "False"
    status = {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [
            {"type": "Ready", "status": flag, "lastTransitionTime": now()},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": now()},
        ],
    }
    await client.patch(Pod.Status, name, {"status": status}, namespace=ns)


async def register(
    client: AsyncClient,
    ns: str,
    *,
    domain_uid: str,
    clique_id: str,
    node: str,
    ip: str,
    ready: bool = False,
    max_nodes: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
) -> ComputeDomainClique:
    """Do what a daemon does: wait for the entry the controller gives its labelled pod (when a
    daemon pod of the CD runs on ``node``), then report its readiness. Without such a pod, write
    the entry by hand (a clique as an earlier writer left it)."""
    name = names.clique_object_name(domain_uid, clique_id)
    labels = {names.COMPUTE_DOMAIN_LABEL: domain_uid}
    pods = [p async for p in client.list(Pod, namespace=ns, labels=labels)]
    has_pod = any(p.spec is not None and p.spec.nodeName == node for p in pods)
    if not has_pod:
        try:
            raw = await client.get(ComputeDomainCliqueResource, name, namespace=ns)
            clique = ComputeDomainClique.from_resource(raw)
            fresh = False
        except ApiError:
            clique = ComputeDomainClique.new(
                domain_uid=domain_uid, clique_id=clique_id, namespace=ns
            )
            fresh = True
        clique = clique.with_registered(node, ip, max_nodes)
        clique = clique.with_status(node, Readiness.READY if ready else Readiness.NOT_READY)
        res = clique.to_resource()
        written = await (client.create(res) if fresh else client.replace(res))
        return ComputeDomainClique.from_resource(written)

    def listed(raw: Any) -> bool:
        entry = ComputeDomainClique.from_resource(raw).daemon(node)
        return entry is not None and entry.ip_address == ip

    await wait_for(client, ComputeDomainCliqueResource, name, listed, namespace=ns)
    if ready:
        await set_clique_status(
            client, ns, domain_uid=domain_uid, clique_id=clique_id, node=node, ready=True
        )
    raw = await client.get(ComputeDomainCliqueResource, name, namespace=ns)
    return ComputeDomainClique.from_resource(raw)


async def set_clique_status(
    client: AsyncClient, ns: str, *, domain_uid: str, clique_id: str, node: str, ready: bool
) -> None:
    """A daemon's readiness report: a JSON patch of its entry's status, guarded by its node."""
    name = names.clique_object_name(domain_uid, clique_id)
    raw = await client.get(ComputeDomainCliqueResource, name, namespace=ns)
    clique = ComputeDomainClique.from_resource(raw)
    (at,) = [k for k, d in enumerate(clique.daemons) if d.node_name == node]
    value = (Readiness.READY if ready else Readiness.NOT_READY).value
    ops = [
        {"op": "test", "path": f"/daemons/{at}/nodeName", "value": node},
        {"op": "add", "path": f"/daemons/{at}/status", "value": value},
    ]
    await client.patch(
        ComputeDomainCliqueResource, name, ops, namespace=ns, patch_type=PatchType.JSON
    )


async def workload_pod(client: AsyncClient, ns: str, name: str, *, node: str) -> Pod:
    """A workload pod bound to ``node`` (it never runs: no kubelet plays it)."""
    body = {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    return await client.create(Pod.from_dict(body))


async def workload_claim(
    client: AsyncClient,
    ns: str,
    name: str,
    *,
    domain_uid: str,
    node: str,
    pod: Pod | None = None,
    owned: bool = False,
) -> ResourceClaim:
    """A workload (channel) claim of CD ``domain_uid``, allocated to ``node`` as the scheduler
    would, and reserved for ``pod`` when given; ``node`` "": left unallocated; ``owned``: made
    for ``pod`` (the pod is its controller owner, as for a claim from the pod's template)."""
    config = {
        "apiVersion": names.API_VERSION,
        "kind": names.CHANNEL_CONFIG_KIND,
        "domainID": domain_uid,
        "allocationMode": "Single",
    }
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if owned:
        assert pod is not None and pod.metadata is not None
        ref = {"apiVersion": "v1", "kind": "Pod", "controller": True, "blockOwnerDeletion": True}
        meta["ownerReferences"] = [ref | {"name": pod.metadata.name, "uid": pod.metadata.uid}]
    body = {
        "metadata": meta,
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": names.CHANNEL_REQUEST,
                        "exactly": {"deviceClassName": names.CHANNEL_DEVICE_CLASS},
                    }
                ],
                "config": [
                    {
                        "requests": [names.CHANNEL_REQUEST],
                        "opaque": {"driver": names.DRIVER_NAME, "parameters": config},
                    }
                ],
            }
        },
    }
    made = await client.create(ResourceClaim.from_dict(body))
    if not node:
        return made
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": names.CHANNEL_REQUEST,
                        "driver": names.DRIVER_NAME,
                        "pool": node,
                        "device": "channel-0",
                    }
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    if pod is not None:
        meta = pod.metadata
        assert meta is not None
        status["reservedFor"] = [{"resource": "pods", "name": meta.name, "uid": meta.uid}]
    return await client.patch(ResourceClaim.Status, name, {"status": status}, namespace=ns)


async def pending_pod(client: AsyncClient, ns: str, name: str, *, claim: str) -> Pod:
    """A pod that uses ``claim`` and that no node fits (its node selector matches none): the
    real scheduler marks it ``PodScheduled=False`` with its own message."""
    body = {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "nodeSelector": {"compute-domains-test/no-such-node": "true"},
            "containers": [
                {
                    "name": "work",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "ch"}]},
                }
            ],
            "resourceClaims": [{"name": "ch", "resourceClaimName": claim}],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    return await client.create(Pod.from_dict(body))


async def release_claim(client: AsyncClient, ns: str, name: str) -> None:
    """What the claim controller does once the claim's pods are gone: delete the claim."""
    with contextlib.suppress(ApiError):
        await client.delete(ResourceClaim, name, namespace=ns)


@contextlib.asynccontextmanager
async def nodes(client: AsyncClient, *names_: str) -> AsyncIterator[list[FakeNode]]:
    made = [await FakeNode(client, n).start() for n in names_]
    try:
        yield made
    finally:
        for node in made:
            await node.delete()
