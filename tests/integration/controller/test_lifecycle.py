"""Creation and deletion of ComputeDomains against the real control plane.

Creation: finalizer, DaemonSet and both ResourceClaimTemplates rendered as specified, the first
status (NotReady, ``NoWorkload``), an Event. Deletion: the upstream order (workload template,
daemon template, DaemonSet, node labels, CD finalizer), read from the etcd revisions at which
each step happened, and nothing of the CD left behind, including its cliques. Deletion under a
running workload waits (finalizer kept, daemons kept, ``Deleting`` condition and an Event
naming the pods) until the last workload claim is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Event, Node
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.sim import state
from tests.integration.controller import objects
from tests.integration.controller.conftest import IMAGE, StartController
from tests.integration.helpers import wait_for, wait_gone


async def test_creation_renders_objects_and_first_status(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    cd = await objects.create_cd(client, "cd-a", user_ns, "cd-a-channel", mode="All")
    uid = cd.metadata.uid
    ds_name = f"computedomain-daemon-{uid}"

    cd = await wait_for(
        client, ComputeDomainResource, "cd-a", lambda c: bool(c.get("status")), namespace=user_ns
    )
    assert names.FINALIZER in cd.metadata.finalizers
    st = cd["status"]
    assert {k: v for k, v in st.items() if k != "conditions"} == {
        "status": "NotReady",
        "readyNodes": 0,
        "totalNodes": 0,
    }
    (ready,) = st["conditions"]
    assert {k: ready[k] for k in ("type", "status", "reason", "observedGeneration")} == {
        "type": "Ready",
        "status": "False",
        "reason": "NoWorkload",
        "observedGeneration": cd.metadata.generation,
    }
    assert ready["lastTransitionTime"] and "no workload claim" in ready["message"]

    ds = await wait_for(client, DaemonSet, ds_name, lambda _d: True, namespace=driver_ns)
    assert ds.metadata.labels == {names.COMPUTE_DOMAIN_LABEL: uid}
    assert ds.metadata.finalizers == [names.FINALIZER]
    assert not ds.metadata.ownerReferences
    assert ds.spec.selector.matchLabels == {names.COMPUTE_DOMAIN_LABEL: uid}
    pod = ds.spec.template.spec
    assert ds.spec.template.metadata.labels == {names.COMPUTE_DOMAIN_LABEL: uid}
    assert pod.serviceAccountName == "compute-domain-daemon-service-account"
    assert pod.nodeSelector == {names.COMPUTE_DOMAIN_LABEL: uid}
    assert {(t.operator, t.effect) for t in pod.tolerations} == {
        ("Exists", "NoSchedule"),
        ("Exists", "NoExecute"),
        ("Exists", "PreferNoSchedule"),
    }
    assert [(c.name, c.resourceClaimTemplateName) for c in pod.resourceClaims] == [
        ("compute-domain-daemon", ds_name)
    ]
    (container,) = pod.containers
    assert container.name == "compute-domain-daemon"
    assert container.image == IMAGE
    assert container.command == ["cdctl", "daemon", "run"]
    assert [c.name for c in container.resources.claims] == ["compute-domain-daemon"]
    env = {e.name: e for e in container.env}
    assert env["MAX_NODES_PER_IMEX_DOMAIN"].value == "18"
    assert env["LOG_VERBOSITY"].value == "info"
    assert env["NVIDIA_VISIBLE_DEVICES"].value == "void"
    fields = {
        "NODE_NAME": "spec.nodeName",
        "POD_IP": "status.podIP",
        "POD_UID": "metadata.uid",
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
    }
    for var, path in fields.items():
        assert env[var].valueFrom.fieldRef.fieldPath == path
    # Every probe asks the daemon itself (its own IMEX check), so none starts a process.
    (port,) = container.ports
    assert (port.name, port.containerPort) == ("metrics", 8082)
    for probe in (container.startupProbe, container.livenessProbe, container.readinessProbe):
        assert probe.exec is None
        assert (probe.httpGet.path, probe.httpGet.port) == ("/readyz", "metrics")
    assert container.readinessProbe.periodSeconds == 5
    assert container.startupProbe.periodSeconds == 1

    daemon_rct = await client.get(ResourceClaimTemplate, ds_name, namespace=driver_ns)
    assert daemon_rct.metadata.labels == {
        names.COMPUTE_DOMAIN_LABEL: uid,
        names.TARGET_LABEL: "Daemon",
    }
    assert daemon_rct.metadata.finalizers == [names.FINALIZER]
    devices = daemon_rct.spec.spec.devices
    assert [(r.name, r.exactly.deviceClassName) for r in devices.requests] == [
        ("daemon", "compute-domain-daemon.nvidia.com")
    ]
    assert devices.config[0].requests == ["daemon"]
    assert devices.config[0].opaque.driver == "compute-domain.nvidia.com"
    assert devices.config[0].opaque.parameters == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainDaemonConfig",
        "domainID": uid,
    }

    rct = await client.get(ResourceClaimTemplate, "cd-a-channel", namespace=user_ns)
    assert rct.metadata.labels == {names.COMPUTE_DOMAIN_LABEL: uid, names.TARGET_LABEL: "Workload"}
    assert rct.metadata.finalizers == [names.FINALIZER]
    (request,) = rct.spec.spec.devices.requests
    assert request.name == "channel"
    assert request.exactly.deviceClassName == "compute-domain-default-channel.nvidia.com"
    (selector,) = request.exactly.selectors
    assert uid in selector.cel.expression and "domain" in selector.cel.expression
    assert rct.spec.spec.devices.config[0].opaque.parameters == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": uid,
        "allocationMode": "All",
    }

    async def has_event() -> None:
        while True:
            found = [
                e
                async for e in client.list(Event, namespace=user_ns)
                if e.involvedObject.uid == uid and e.reason == "DaemonSetCreated"
            ]
            if found:
                return
            await asyncio.sleep(0.2)

    await asyncio.wait_for(has_event(), 30)


async def test_num_nodes_keeps_status_not_ready(
    client: AsyncClient, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    await objects.create_cd(client, "cd-n", user_ns, "cd-n-channel", num_nodes=2)
    cd = await wait_for(
        client, ComputeDomainResource, "cd-n", lambda c: bool(c.get("status")), namespace=user_ns
    )
    assert cd["status"]["status"] == "NotReady"


async def test_deletion_order_and_nothing_left_behind(
    client: AsyncClient,
    driver_ns: str,
    user_ns: str,
    start_controller: StartController,
    sim: state.SimPaths,
) -> None:
    await start_controller()
    cd = await objects.create_cd(client, "cd-d", user_ns, "cd-d-channel")
    uid = cd.metadata.uid
    ds_name = f"computedomain-daemon-{uid}"
    await wait_for(
        client, ComputeDomainResource, "cd-d", lambda c: bool(c.get("status")), namespace=user_ns
    )
    await wait_for(client, DaemonSet, ds_name, lambda _d: True, namespace=driver_ns)
    await wait_for(
        client, ResourceClaimTemplate, "cd-d-channel", lambda _r: True, namespace=user_ns
    )
    node_name = f"node-{uid[:6]}"
    async with objects.nodes(client, node_name) as (_node,):
        # What the plugin does on Prepare, and what a daemon does on start.
        await client.patch(
            Node, node_name, {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: uid}}}
        )
        await objects.register(
            client, driver_ns, domain_uid=uid, clique_id="cluster.0", node=node_name, ip="10.9.0.1"
        )

        # Revisions at which each step happened, from watches started before the delete.
        marks: dict[str, int] = {}
        # Each watch first lists its object (an ADDED event): once all five did, none can miss
        # the delete's effects.
        listed = {k: asyncio.Event() for k in ("workload", "daemon-rct", "ds", "label", "cd")}

        async def watch(key: str, res: Any, ns: str | None, name: str, done: Any) -> None:
            watch = client.watch(res, namespace=ns, fields={"metadata.name": name})
            async with contextlib.aclosing(watch) as events:  # closed on return, not collected
                async for op, obj in events:
                    listed[key].set()
                    if done(op, obj):
                        marks[key] = int(obj.metadata.resourceVersion)
                        return

        terminating = lambda op, o: o.metadata.deletionTimestamp is not None  # noqa: E731
        unlabelled = lambda op, o: names.COMPUTE_DOMAIN_LABEL not in (o.metadata.labels or {})  # noqa: E731
        watchers = [
            asyncio.create_task(
                watch("workload", ResourceClaimTemplate, user_ns, "cd-d-channel", terminating)
            ),
            asyncio.create_task(
                watch("daemon-rct", ResourceClaimTemplate, driver_ns, ds_name, terminating)
            ),
            asyncio.create_task(watch("ds", DaemonSet, driver_ns, ds_name, terminating)),
            asyncio.create_task(watch("label", Node, None, node_name, unlabelled)),
            asyncio.create_task(
                watch("cd", ComputeDomainResource, user_ns, "cd-d", lambda op, o: op == "DELETED")
            ),
        ]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in listed.values())), 30)
        await client.delete(ComputeDomainResource, "cd-d", namespace=user_ns)
        await asyncio.wait_for(asyncio.gather(*watchers), 60)

        assert marks["workload"] < marks["daemon-rct"] < marks["ds"] < marks["label"] < marks["cd"]
        await wait_gone(client, ResourceClaimTemplate, "cd-d-channel", user_ns)
        await wait_gone(client, ResourceClaimTemplate, ds_name, driver_ns)
        await wait_gone(client, DaemonSet, ds_name, driver_ns)
        await wait_gone(client, ComputeDomainCliqueResource, f"{uid}.cluster.0", driver_ns)
        labelled = [n async for n in client.list(Node, labels={names.COMPUTE_DOMAIN_LABEL: uid})]
        assert labelled == []


async def test_deletion_waits_for_the_workload(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    """Like PVC protection: the CD, its daemons and status stay while a pod holds its claim."""
    await start_controller()
    cd = await objects.create_cd(client, "cd-w", user_ns, "cd-w-channel")
    uid = cd.metadata.uid
    ds_name = f"computedomain-daemon-{uid}"
    await wait_for(client, DaemonSet, ds_name, lambda _d: True, namespace=driver_ns)
    await wait_for(
        client, ResourceClaimTemplate, "cd-w-channel", lambda _r: True, namespace=user_ns
    )
    node = f"node-{uid[:6]}"
    async with objects.nodes(client, node):
        pod = await objects.workload_pod(client, user_ns, "job-0", node=node)
        await objects.workload_claim(
            client, user_ns, "job-0-channel", domain_uid=uid, node=node, pod=pod
        )
        await client.patch(Node, node, {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: uid}}})
        await objects.daemon_pod(
            client, driver_ns, domain_uid=uid, node=node, ip="10.4.0.1", clique_id="c.0", ready=True
        )
        await objects.register(
            client, driver_ns, domain_uid=uid, clique_id="c.0", node=node, ip="10.4.0.1", ready=True
        )
        await wait_for(
            client,
            ComputeDomainResource,
            "cd-w",
            lambda c: (c.get("status") or {}).get("status") == "Ready",
            namespace=user_ns,
        )

        await client.delete(ComputeDomainResource, "cd-w", namespace=user_ns)

        def deleting(c: Any) -> list[Any]:
            conds = (c.get("status") or {}).get("conditions") or []
            return [x for x in conds if x["type"] == "Deleting"]

        cdo = await wait_for(
            client, ComputeDomainResource, "cd-w", lambda c: bool(deleting(c)), namespace=user_ns
        )
        (cond,) = deleting(cdo)
        assert (cond["status"], cond["reason"]) == ("True", "WaitingForWorkload")
        assert f"{user_ns}/job-0" in cond["message"]
        assert names.FINALIZER in cdo.metadata.finalizers
        assert cdo["status"]["status"] == "Ready", "the running job keeps its domain"
        ds = await client.get(DaemonSet, ds_name, namespace=driver_ns)
        assert ds.metadata.deletionTimestamp is None, "its daemons keep running"
        await wait_gone(client, ResourceClaimTemplate, "cd-w-channel", user_ns)  # no new claims

        async def waiting_event() -> Any:
            while True:
                async for e in client.list(Event, namespace=user_ns):
                    if e.involvedObject.uid == uid and e.reason == "WaitingForWorkload":
                        return e
                await asyncio.sleep(0.2)

        event = await asyncio.wait_for(waiting_event(), 30)
        assert f"{user_ns}/job-0" in event.message

        # The last claim goes (its pod ended): the teardown proceeds.
        await objects.release_claim(client, user_ns, "job-0-channel")
        await wait_gone(client, ComputeDomainResource, "cd-w", user_ns)
        await wait_gone(client, DaemonSet, ds_name, driver_ns)
        labelled = [n async for n in client.list(Node, labels={names.COMPUTE_DOMAIN_LABEL: uid})]
        assert labelled == []
