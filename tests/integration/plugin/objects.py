"""Hand-made objects for plugin tests: a CD with its clique, claim templates, pods, logs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Namespace, Node, Pod, ServiceAccount
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate
from lightkube.types import PatchType

from compute_domains.api import agentpods, configs, names, sharedimex
from compute_domains.api.clique import (
    CliqueDaemon,
    ComputeDomainClique,
    ComputeDomainCliqueResource,
)
from compute_domains.api.computedomain import (
    AllocationMode,
    ComputeDomainResource,
    Readiness,
)
from compute_domains.plugin import checkpoint, checkpointfile
from compute_domains.sim import state
from tests.integration.helpers import wait_for

IMAGE = "debian:12"


async def namespace(admin: AsyncClient, name: str) -> None:
    """Create a namespace and wait for its default ServiceAccount (pods need it)."""
    await admin.create(Namespace.from_dict({"metadata": {"name": name}}))
    await wait_for(admin, ServiceAccount, "default", lambda _sa: True, namespace=name)


async def compute_domain(
    admin: AsyncClient, ns: str, name: str, *, mode: str = "Single", scope: str | None = None
) -> str:
    """Create a CD (its template is named after it; ``scope``: its ``imex-scope`` annotation,
    as the controller writes it); returns its UID."""
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if scope is not None:
        meta["annotations"] = {sharedimex.SCOPE_ANNOTATION: scope}
    obj = await admin.create(
        ComputeDomainResource.from_dict(
            {
                "apiVersion": names.API_VERSION,
                "kind": names.COMPUTE_DOMAIN_KIND,
                "metadata": meta,
                "spec": {
                    "numNodes": 0,
                    "channel": {"resourceClaimTemplate": {"name": name}, "allocationMode": mode},
                },
            }
        )
    )
    uid = obj.metadata.uid
    assert uid
    return str(uid)


async def ready_clique(
    admin: AsyncClient,
    driver_ns: str,
    domain_uid: str,
    clique_id: str,
    nodes: list[str],
    status: Readiness = Readiness.READY,
) -> None:
    """The clique running daemons would have written: every node's entry ``status``."""
    clique = ComputeDomainClique.new(
        domain_uid=domain_uid, clique_id=clique_id, namespace=driver_ns
    )
    daemons = tuple(
        CliqueDaemon(
            node_name=node,
            ip_address=f"127.9.0.{i + 1}",
            clique_id=clique_id,
            index=i,
            status=status,
        )
        for i, node in enumerate(nodes)
    )
    await admin.create(ComputeDomainClique(metadata=clique.metadata, daemons=daemons).to_resource())


async def shared_registry(
    admin: AsyncClient,
    driver_ns: str,
    clique_id: str,
    nodes: list[str],
    status: Readiness = Readiness.READY,
) -> None:
    """The shared registry ``shared-imex.<clique>`` as the resident agents of ``nodes`` write
    it once their shared IMEX runs: one entry each, ``status``, with the IP of the node's agent
    pod (``agent_pods``: a prepare waits for it Ready with that IP)."""
    ips = await agent_pods(admin, driver_ns, nodes)
    daemons = [
        CliqueDaemon(
            node_name=node,
            ip_address=ips[node],
            clique_id=clique_id,
            index=i,
            status=status,
        ).to_dict()
        for i, node in enumerate(nodes)
    ]
    labels = {sharedimex.SCOPE_LABEL: sharedimex.Scope.PER_CLIQUE.value}
    labels[names.CLIQUE_ID_LABEL] = clique_id
    meta = {"name": sharedimex.registry_name(clique_id), "namespace": driver_ns, "labels": labels}
    body = {"apiVersion": names.API_VERSION, "kind": names.CLIQUE_KIND, "metadata": meta}
    await admin.create(ComputeDomainCliqueResource(**body, daemons=daemons))


async def agent_pods(admin: AsyncClient, driver_ns: str, nodes: list[str]) -> dict[str, str]:
    """A stand-in resident agent pod on each of ``nodes`` (label ``app.kubernetes.io/
    component=imex-agent``, a sleeping container its node's kubelet runs), once Ready: node →
    its pod IP."""
    for node in nodes:
        body = {
            "metadata": {
                "name": f"agent-{node}",
                "namespace": driver_ns,
                "labels": dict(agentpods.LABELS),
            },
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "imex-agent", "image": IMAGE, "command": ["sleep", "3600"]}
                ],
                "terminationGracePeriodSeconds": 1,
                "tolerations": [{"operator": "Exists"}],
            },
        }
        await admin.create(Pod.from_dict(body))
    ips = {}
    for node in nodes:
        pod = await wait_for(
            admin,
            Pod,
            f"agent-{node}",
            lambda p: bool(
                p.status
                and p.status.podIP
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            ),
            namespace=driver_ns,
            timeout=120,
        )
        ips[node] = str(pod.status.podIP)
    return ips


async def cd_status_ready(admin: AsyncClient, ns: str, name: str, node: str) -> None:
    """The status the controller derives for a node without a clique once its daemon is Ready."""
    entry = {
        "name": node,
        "ipAddress": "127.9.9.9",
        "cliqueID": "",
        "index": names.NON_FABRIC_INDEX,
        "status": Readiness.READY.value,
    }
    await admin.patch(
        ComputeDomainResource.Status,
        name,
        {"status": {"status": "Ready", "nodes": [entry]}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )


async def cd_condition(
    admin: AsyncClient, ns: str, name: str, kind: str, status: str, reason: str, message: str
) -> None:
    """A status with one condition, as the controller writes it."""
    cond = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-01T10:00:00Z",
        "observedGeneration": 1,
    }
    await admin.patch(
        ComputeDomainResource.Status,
        name,
        {"status": {"status": "NotReady", "conditions": [cond]}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )


async def set_ready(
    admin: AsyncClient, driver_ns: str, domain_uid: str, clique_id: str, node: str
) -> None:
    """Flip ``node``'s clique entry to Ready, as its daemon does when IMEX is up."""
    name = names.clique_object_name(domain_uid, clique_id)
    current = ComputeDomainClique.from_resource(
        await admin.get(ComputeDomainCliqueResource, name, namespace=driver_ns)
    )
    await admin.replace(current.with_status(node, Readiness.READY).to_resource())


async def workload_template(
    admin: AsyncClient,
    ns: str,
    name: str,
    domain_uid: str,
    *,
    mode: str = "Single",
    selector: str | None = None,
) -> None:
    """The workload RCT the controller renders: channel class, free-or-own selector (or
    ``selector``: a per-clique CD's ``sharedimex.channel_selector()``), config."""
    config = configs.ComputeDomainChannelConfig(
        domain_uid=domain_uid, allocation_mode=AllocationMode(mode)
    )
    await admin.create(
        ResourceClaimTemplate.from_dict(
            {
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": names.CHANNEL_REQUEST,
                                    "exactly": {
                                        "deviceClassName": names.CHANNEL_DEVICE_CLASS,
                                        "selectors": [
                                            {
                                                "cel": {
                                                    "expression": selector
                                                    or names.channel_selector(domain_uid)
                                                }
                                            }
                                        ],
                                    },
                                }
                            ],
                            "config": [
                                {
                                    "requests": [names.CHANNEL_REQUEST],
                                    "opaque": {
                                        "driver": names.DRIVER_NAME,
                                        "parameters": config.to_dict(),
                                    },
                                }
                            ],
                        }
                    }
                },
            }
        )
    )


async def daemon_template(admin: AsyncClient, ns: str, name: str, domain_uid: str) -> None:
    """The daemon RCT the controller renders in the driver namespace."""
    config = configs.ComputeDomainDaemonConfig(domain_uid=domain_uid)
    await admin.create(
        ResourceClaimTemplate.from_dict(
            {
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": names.DAEMON_REQUEST,
                                    "exactly": {"deviceClassName": names.DAEMON_DEVICE_CLASS},
                                }
                            ],
                            "config": [
                                {
                                    "requests": [names.DAEMON_REQUEST],
                                    "opaque": {
                                        "driver": names.DRIVER_NAME,
                                        "parameters": config.to_dict(),
                                    },
                                }
                            ],
                        }
                    }
                },
            }
        )
    )


async def pod(
    admin: AsyncClient,
    ns: str,
    name: str,
    script: str,
    *,
    template: str | None = None,
    claim: str | None = None,
    node: str | None = None,
) -> None:
    """A pod running ``sh -c script`` with one claim (from a template or by name)."""
    ref: dict[str, Any] = {"name": "cd"}
    if template is not None:
        ref["resourceClaimTemplateName"] = template
    else:
        ref["resourceClaimName"] = claim
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": IMAGE,
                "command": ["sh", "-c", script],
                "resources": {"claims": [{"name": "cd"}]},
            }
        ],
        "resourceClaims": [ref],
        "terminationGracePeriodSeconds": 1,
        "tolerations": [{"operator": "Exists"}],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    await admin.create(Pod.from_dict({"metadata": {"name": name, "namespace": ns}, "spec": spec}))


async def running(admin: AsyncClient, ns: str, name: str, timeout: float = 120) -> Pod:
    return await wait_for(
        admin,
        Pod,
        name,
        lambda p: bool(p.status and p.status.phase == "Running"),
        namespace=ns,
        timeout=timeout,
    )


def _main_started(pod: Pod) -> bool:
    """Whether the pod's ``main`` container is running or has run."""
    for status in (pod.status.containerStatuses or []) if pod.status else []:
        if status.name == "main" and status.state is not None:
            if status.state.running is not None or status.state.terminated is not None:
                return True
    return False


async def log_containing(
    admin: AsyncClient, ns: str, name: str, text: str, timeout: float = 30
) -> str:
    """The container's log once it contains ``text``.

    The log exists only once the container started (before that the kubelet answers the log
    request with an error), so this first waits for the pod's ``main`` container to have run.
    """
    log = ""
    try:
        async with asyncio.timeout(timeout):
            await wait_for(admin, Pod, name, _main_started, namespace=ns, timeout=timeout)
            while True:
                lines = [line async for line in admin.log(name, namespace=ns, container="main")]
                log = "".join(lines)
                if text in log:
                    return log
                await asyncio.sleep(0.5)
    except TimeoutError:
        pod = await admin.get(Pod, name, namespace=ns)
        status = pod.status.to_dict() if pod.status else {}
        raise AssertionError(f"{ns}/{name} never logged {text!r}; log {log!r}; {status}") from None


async def claim_of(admin: AsyncClient, ns: str, pod_name: str) -> ResourceClaim:
    p = await admin.get(Pod, pod_name, namespace=ns)
    assert p.status is not None and p.status.resourceClaimStatuses
    claim_name = p.status.resourceClaimStatuses[0].resourceClaimName
    assert claim_name
    return await admin.get(ResourceClaim, claim_name, namespace=ns)


async def node_label(admin: AsyncClient, node: str) -> str | None:
    n = await admin.get(Node, node)
    return (n.metadata.labels or {}).get(names.COMPUTE_DOMAIN_LABEL) if n.metadata else None


async def wait_label(admin: AsyncClient, node: str, want: str | None, timeout: float = 60) -> None:
    await wait_for(
        admin,
        Node,
        node,
        lambda n: (n.metadata.labels or {}).get(names.COMPUTE_DOMAIN_LABEL) == want,
        timeout=timeout,
    )


async def events(admin: AsyncClient, ns: str, pod_name: str) -> list[Event]:
    return [
        e
        async for e in admin.list(Event, namespace=ns)
        if e.involvedObject is not None and e.involvedObject.name == pod_name
    ]


async def event_containing(admin: AsyncClient, ns: str, pod_name: str, text: str) -> str:
    """The message of the first Event of pod ``pod_name`` that contains ``text`` (waits for it;
    the caller bounds the wait)."""
    while True:
        for e in await events(admin, ns, pod_name):
            if text in (e.message or ""):
                return e.message or ""
        await asyncio.sleep(0.3)


def read_checkpoint(sim: state.SimPaths, node: str) -> checkpoint.Checkpoint:
    path = (
        sim.node_root(node)
        / "var/lib/kubelet/plugins"
        / names.DRIVER_NAME
        / checkpointfile.FILE_NAME
    )
    found = checkpointfile.load(path)
    assert found is not None
    return found


def cdi_spec_path(sim: state.SimPaths, node: str, claim_uid: str) -> Path:
    from compute_domains.plugin import cdi

    return sim.node_root(node) / "var/run/cdi" / cdi.claim_spec_file_name(claim_uid)


async def bad_opaque_claim(admin: AsyncClient, ns: str, name: str) -> None:
    """Upstream G1's channel claim: its opaque config carries a field the driver does not know."""
    params = {
        "apiVersion": names.API_VERSION,
        "kind": names.CHANNEL_CONFIG_KIND,
        "domainID": "not-needed-for-test",
        "unexpectedField": "foo",
    }
    request = {"name": "chan", "exactly": {"deviceClassName": names.CHANNEL_DEVICE_CLASS}}
    opaque = {"driver": names.DRIVER_NAME, "parameters": params}
    await admin.create(
        ResourceClaim.from_dict(
            {
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "devices": {
                        "requests": [request],
                        "config": [{"requests": ["chan"], "opaque": opaque}],
                    }
                },
            }
        )
    )
