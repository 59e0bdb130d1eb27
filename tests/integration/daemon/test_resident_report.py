"""A resident agent's daemon reports its entry Ready from its own IMEX check, not from its pod.

A per-CD daemon pod's entry follows the pod's ``Ready`` condition (gated by the daemon's own
check, ``readiness.OwnCheckGate``). A resident agent's pod is long-lived: its readiness probe
(period 5 s) turns it NotReady while a new CD forms and Ready again only at its next run after
IMEX is READY, so that gate held every node's report back by up to the probe period (issue 26
point 6; measured 1.7 s median, 10.6 s max at N = 18). Here the daemon runs as the agent runs
it (``DaemonSettings.resident``), in this process with the IMEX stand-in in-process, for a pod
on a node no kubelet serves: the test alone writes that pod's status, and keeps its ``Ready``
condition False throughout. The entry (made by the test, as the controller would) must still
turn Ready once IMEX is up, and the daemon must not write the pod (the agent labelled it, CD and
clique ID in one patch): no field of the pod is managed by the daemon's field manager.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.api import imexsignal, names
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import app, imexconfig
from compute_domains.daemon.config import DaemonSettings, HealthSettings, Identity, PeerSettings
from compute_domains.infra import kube
from compute_domains.sim import imex_inproc, state
from tests.integration.helpers import wait_for
from tests.unit.sim.test_imex import _free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

IP = "127.0.0.43"
CLIQUE_ID = "5b1c0d6e-0000-4000-8000-00000000000a.3"
MANAGER = "resident-daemon-under-test"


@pytest.fixture
async def daemon_client(daemon_sim: state.SimPaths) -> AsyncIterator[AsyncClient]:
    """The daemon's own client, under a field manager of its own (to see what it writes)."""
    c = kube.client(kube.KubeSettings(kubeconfig=daemon_sim.kubeconfig, field_manager=MANAGER))
    yield c
    await c.close()


async def _agent_pod(admin: AsyncClient, ns: str, cd_uid: str) -> Pod:
    """The agent's pod as the agent left it before starting the daemon: on a node no kubelet
    serves, labelled for the CD with the clique ID, Running, with our IP, and NotReady."""
    labels = {names.COMPUTE_DOMAIN_LABEL: cd_uid, names.CLIQUE_ID_LABEL: CLIQUE_ID}
    pod = await admin.create(
        Pod.from_dict(
            {
                "metadata": {"name": "imex-agent-x", "namespace": ns, "labels": labels},
                "spec": {
                    "nodeName": "no-kubelet-serves-this",
                    "containers": [{"name": "agent", "image": "debian:12"}],
                },
            }
        )
    )
    status = {
        "phase": "Running",
        "podIP": IP,
        "podIPs": [{"ip": IP}],
        "conditions": [{"type": "Ready", "status": "False"}],
    }
    await admin.patch(Pod.Status, "imex-agent-x", {"status": status}, namespace=ns)
    return pod


def _identity(pod: Pod, node: str, cd: Any, ns: str) -> Identity:
    """The daemon's identity for the agent pod ``pod`` serving ``cd`` on ``node``."""
    assert pod.metadata is not None
    return Identity(
        node_name=node,
        pod_name="imex-agent-x",
        pod_namespace=ns,
        pod_uid=pod.metadata.uid or "",
        pod_ip=IP,
        clique_id=CLIQUE_ID,
        domain_uid=cd.metadata.uid,
        domain_name=cd.metadata.name,
        domain_namespace=ns,
    )


def _settings(tmp: Path, ident: Identity) -> DaemonSettings:
    domain = tmp / "domain"
    domain.mkdir()
    return DaemonSettings(
        identity=ident,
        max_nodes=2,
        imex=imexconfig.ImexFilesSettings(
            config_path=domain / "imexd.agent.cfg",
            nodes_config_path=domain / "nodes.cfg",
            template_path=None,
            server_port=_free_port((IP,)),
            cmd_port=_free_port((IP,)),
        ),
        health=HealthSettings(fast_interval=0.2),
        peers=PeerSettings(hosts_file=tmp / "hosts"),
        resident=True,
    )


async def _entry_status(admin: AsyncClient, ns: str, name: str, node: str) -> AsyncIterator[Any]:
    async for _, raw in admin.watch(ComputeDomainCliqueResource, namespace=ns):
        if raw.metadata is not None and raw.metadata.name == name:
            entry = ComputeDomainClique.from_resource(raw).daemon(node)
            yield None if entry is None else entry.status


async def test_the_entry_turns_ready_by_the_own_check_while_the_pod_is_not_ready(
    admin: AsyncClient,
    daemon_client: AsyncClient,
    driver_ns: str,
    compute_domain: Any,
    tmp_path: Path,
) -> None:
    ns, cd = driver_ns, compute_domain
    pod = await _agent_pod(admin, ns, cd.metadata.uid)
    node = f"n-{uuid.uuid4().hex[:4]}"
    ident = _identity(pod, node, cd, ns)
    # Our entry, as the controller adds it for the pod's labels (index 0, NotReady).
    clique = ComputeDomainClique.new(domain_uid=cd.metadata.uid, clique_id=CLIQUE_ID, namespace=ns)
    await admin.create(clique.with_registered(node, IP, 2).to_resource())
    settings = _settings(tmp_path, ident)
    hosts = settings.peers.hosts_file

    def host_path(inside: Path) -> Path:
        return hosts if inside == Path("/etc/hosts") else inside

    daemon = app.Daemon(settings, daemon_client, programs=imex_inproc.InProcessImex(host_path))
    task = asyncio.create_task(daemon.run())
    try:
        async with asyncio.timeout(60):
            async for status in _entry_status(admin, ns, ident.clique_name, node):
                if status is Readiness.READY:
                    break
        assert daemon.health.ok
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    after = await admin.get(Pod, "imex-agent-x", namespace=ns)
    assert after.status is not None
    assert [(c.type, c.status) for c in after.status.conditions or []] == [("Ready", "False")]
    managers = {f.manager for f in after.metadata.managedFields or []}
    assert MANAGER not in managers, f"the daemon wrote its pod: {managers}"


async def test_with_the_signal_declared_the_daemon_writes_only_its_signal(
    admin: AsyncClient,
    daemon_client: AsyncClient,
    driver_ns: str,
    compute_domain: Any,
    tmp_path: Path,
) -> None:
    """The agent's pod declares the IMEX readiness signal (``DaemonSettings.ready_signal``):
    the daemon's passing check becomes the signal on its pod, its entry's status is left to
    the controller (none runs here, so it stays NotReady), and the signal goes when it stops."""
    ns, cd = driver_ns, compute_domain
    pod = await _agent_pod(admin, ns, cd.metadata.uid)
    node = f"n-{uuid.uuid4().hex[:4]}"
    ident = _identity(pod, node, cd, ns)
    clique = ComputeDomainClique.new(domain_uid=cd.metadata.uid, clique_id=CLIQUE_ID, namespace=ns)
    await admin.create(clique.with_registered(node, IP, 2).to_resource())
    settings = dataclasses.replace(_settings(tmp_path, ident), ready_signal=True)
    hosts = settings.peers.hosts_file

    def host_path(inside: Path) -> Path:
        return hosts if inside == Path("/etc/hosts") else inside

    began = datetime.datetime.now(datetime.UTC)
    daemon = app.Daemon(settings, daemon_client, programs=imex_inproc.InProcessImex(host_path))
    key = imexsignal.key(cd.metadata.uid)
    task = asyncio.create_task(daemon.run())
    try:
        signalled = await wait_for(
            admin,
            Pod,
            "imex-agent-x",
            lambda p: key in ((p.metadata.annotations if p.metadata else None) or {}),
            namespace=ns,
        )
        assert daemon.health.ok
        notes = (signalled.metadata.annotations if signalled.metadata else None) or {}
        written = imexsignal.decode(notes[key])
        assert written is not None and written.at > began
        raw = await admin.get(ComputeDomainCliqueResource, ident.clique_name, namespace=ns)
        entry = ComputeDomainClique.from_resource(raw).daemon(node)
        assert entry is not None and entry.status is Readiness.NOT_READY
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    after = await admin.get(Pod, "imex-agent-x", namespace=ns)
    assert key not in ((after.metadata.annotations if after.metadata else None) or {})
    raw = await admin.get(ComputeDomainCliqueResource, ident.clique_name, namespace=ns)
    assert ComputeDomainClique.from_resource(raw).daemon(node) is None  # removed at its stop
