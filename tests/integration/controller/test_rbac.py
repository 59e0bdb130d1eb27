"""The chart's RBAC is enough, and only what is needed: the controller runs under its own account.

The chart's ``rbac-controller.yaml`` and ``rbac-daemon.yaml`` are rendered with the built
``helm`` and applied; the controller then runs in-process with a token of the chart's controller
ServiceAccount (not the admin), leader election and metrics on, through a CD's whole life:
creation, status from a daemon and a workload claim, clique pruning, a deletion that waits for
the workload, node-label removal, deletion. A missing verb
fails this test as it would fail a user. The daemon account is checked with
SubjectAccessReviews for what a daemon does, and for what it must not do.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx2 as httpx
import yaml
from lightkube import AsyncClient, codecs
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.authorization_v1 import ResourceAttributes, SubjectAccessReviewSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.authorization_v1 import SubjectAccessReview
from lightkube.resources.core_v1 import Event, Node, Pod, ServiceAccount
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from compute_domains import controller
from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.infra import kube
from compute_domains.sim import state, toolchain
from tests.integration.controller import objects
from tests.integration.controller.conftest import IMAGE, StartController
from tests.integration.helpers import wait_for

CHART = Path(__file__).resolve().parents[3] / "deploy/helm/compute-domains"
RELEASE = "cdtest"
CLIQUE = "c0ffee00-0000-0000-0000-000000000002.1"


def _render(helm: Path, namespace: str, *templates: str) -> str:
    argv = [str(helm), "template", RELEASE, str(CHART), "-n", namespace, "--kube-version", "1.34.0"]
    argv += ["--set", "compat.nvidiaNames=false"]  # names after the release: cdtest-controller
    for template in templates:
        argv += ["--show-only", f"templates/{template}"]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


async def _apply_rbac(client: AsyncClient, toolset: toolchain.Toolset, ns: str) -> list[Any]:
    text = _render(toolset.bin_dir / "helm", ns, "rbac-controller.yaml", "rbac-daemon.yaml")
    created = []
    for obj in codecs.load_all_yaml(text):
        created.append(await client.create(obj))
    return created


async def _token_kubeconfig(
    client: AsyncClient, sim: state.SimPaths, ns: str, account: str, path: Path
) -> Path:
    token = await client.create(
        ServiceAccount.Token(
            metadata=ObjectMeta(name=account, namespace=ns),
            spec=TokenRequestSpec(audiences=[], expirationSeconds=3600),
        ),
        account,
        namespace=ns,
    )
    admin = yaml.safe_load(sim.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": account, "user": {"token": token.status.token}}],
        "contexts": [{"name": account, "context": {"cluster": cluster["name"], "user": account}}],
        "current-context": account,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _cleanup_cluster_rbac(client: AsyncClient, objs: list[Any]) -> None:
    for obj in objs:
        if obj.metadata.namespace is None:
            await client.delete(type(obj), obj.metadata.name)


async def test_controller_runs_under_its_chart_service_account(
    client: AsyncClient,
    sim: state.SimPaths,
    toolset: toolchain.Toolset,
    driver_ns: str,
    user_ns: str,
    start_controller: StartController,
    tmp_path: Path,
) -> None:
    rbac = await _apply_rbac(client, toolset, driver_ns)
    try:
        kubeconfig = await _token_kubeconfig(
            client, sim, driver_ns, f"{RELEASE}-controller", tmp_path / "controller.yaml"
        )
        port = _free_port()
        settings = controller.ControllerSettings(
            namespace=driver_ns,
            kube=kube.KubeSettings(kubeconfig=kubeconfig),
            daemon=controller.DaemonSettings(image=IMAGE),
            leader_election=controller.LeaderElectionSettings(
                enabled=True, lease_name=f"{RELEASE}-controller", identity="rbac-test"
            ),
            metrics_address="127.0.0.1",
            metrics_port=port,
        )
        await start_controller(settings=settings)

        cd = await objects.create_cd(client, "cd-r", user_ns, "cd-r-channel")
        uid = cd.metadata.uid
        ds_name = names.daemon_object_name(uid)
        await wait_for(
            client,
            ComputeDomainResource,
            "cd-r",
            lambda c: bool(c.get("status")),
            namespace=user_ns,
        )
        await wait_for(client, DaemonSet, ds_name, lambda _d: True, namespace=driver_ns)
        await wait_for(
            client, ResourceClaimTemplate, "cd-r-channel", lambda _r: True, namespace=user_ns
        )

        # Events too are written under the controller's account.
        async def event_recorded() -> None:
            while not [
                e
                async for e in client.list(Event, namespace=user_ns)
                if e.involvedObject.uid == uid and e.reason == "DaemonSetCreated"
            ]:
                await asyncio.sleep(0.2)

        await asyncio.wait_for(event_recorded(), 30)
        node = f"r-{uid[:6]}"
        async with objects.nodes(client, node):
            # A workload claim on the node (read under the controller's account too).
            await objects.workload_claim(client, user_ns, "w-0", domain_uid=uid, node=node)
            label = {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: uid}}}
            await client.patch(Node, node, label)
            await objects.daemon_pod(
                client,
                driver_ns,
                domain_uid=uid,
                node=node,
                ip="10.5.0.1",
                clique_id=CLIQUE,
                ready=True,
            )
            await objects.register(
                client,
                driver_ns,
                domain_uid=uid,
                clique_id=CLIQUE,
                node=node,
                ip="10.5.0.1",
                ready=True,
            )
            await wait_for(
                client,
                ComputeDomainResource,
                "cd-r",
                lambda c: (c["status"].get("readyNodes") or 0) == 1,
                namespace=user_ns,
            )
            async with httpx.AsyncClient() as http:
                body = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            assert 'nvidia_dra_compute_domain_info{status="Ready"} 1.0' in body
            assert "compute_domains_controller_leader 1.0" in body
            assert "compute_domains_controller_api_requests_total" in body

            # The pod goes: the controller prunes the clique (pods list + clique patch).
            await client.delete(
                Pod, f"daemon-{uid[:8]}-{node}", namespace=driver_ns, grace_period=0
            )
            await wait_for(
                client,
                ComputeDomainCliqueResource,
                names.clique_object_name(uid, CLIQUE),
                lambda c: not c.get("daemons"),
                namespace=driver_ns,
            )

            # Deleted while its workload claim is held: it waits (status write and Event under
            # the controller's account), then goes once the claim is gone.
            await client.delete(ComputeDomainResource, "cd-r", namespace=user_ns)
            await wait_for(
                client,
                ComputeDomainResource,
                "cd-r",
                lambda c: any(x["type"] == "Deleting" for x in c["status"].get("conditions") or []),
                namespace=user_ns,
            )
            await objects.release_claim(client, user_ns, "w-0")
            await wait_for(
                client,
                Node,
                node,
                lambda n: names.COMPUTE_DOMAIN_LABEL not in (n.metadata.labels or {}),
            )

            async def gone() -> None:
                while [c async for c in client.list(ComputeDomainResource, namespace=user_ns)]:
                    await asyncio.sleep(0.2)

            await asyncio.wait_for(gone(), 60)
    finally:
        await _cleanup_cluster_rbac(client, rbac)


async def _allowed(client: AsyncClient, user: str, **attrs: str) -> bool:
    review = await client.create(
        SubjectAccessReview(
            spec=SubjectAccessReviewSpec(user=user, resourceAttributes=ResourceAttributes(**attrs))
        )
    )
    return bool(review.status.allowed)


async def test_daemon_account_has_what_daemons_need_and_no_more(
    client: AsyncClient, toolset: toolchain.Toolset, driver_ns: str
) -> None:
    rbac = await _apply_rbac(client, toolset, driver_ns)
    try:
        user = f"system:serviceaccount:{driver_ns}:compute-domain-daemon-service-account"
        group = "resource.nvidia.com"
        allowed = [
            {"verb": v, "group": group, "resource": "computedomains", "namespace": "any-user-ns"}
            for v in ("get", "list", "watch")
        ]
        allowed += [
            {"verb": v, "group": group, "resource": "computedomaincliques", "namespace": driver_ns}
            # patch and the reads are what daemons use; create/update/delete stay for daemons
            # of CDs made before the controller assigned indices (rbac-daemon.yaml).
            for v in ("create", "update", "patch", "get", "list", "watch", "delete")
        ]
        allowed += [
            {"verb": v, "resource": "pods", "namespace": driver_ns}
            for v in ("get", "patch", "list", "watch")
        ]
        denied = [
            {"verb": "update", "group": group, "resource": "computedomains", "namespace": "x"},
            {
                "verb": "patch",
                "group": group,
                "resource": "computedomains",
                "subresource": "status",
                "namespace": "x",
            },
            {
                "verb": "create",
                "group": group,
                "resource": "computedomaincliques",
                "namespace": "other",
            },
            {"verb": "patch", "resource": "pods", "namespace": "other"},
            {"verb": "delete", "resource": "pods", "namespace": driver_ns},
            {"verb": "patch", "resource": "nodes"},
            {"verb": "get", "resource": "secrets", "namespace": driver_ns},
        ]
        for attrs in allowed:
            assert await _allowed(client, user, **attrs), attrs
        for attrs in denied:
            assert not await _allowed(client, user, **attrs), attrs
    finally:
        await _cleanup_cluster_rbac(client, rbac)
