"""A per-domain prepare waits for the IMEX readiness signal on the pod serving the CD on its node,
not for the node's entry in the clique object (issue 26 point 6, docs/decisions/0023).

Against the real API server: ``Domains.wait_ready`` of a node without a kubelet (the test plays
the serving pod and its kubelet), the signal written by the daemon's own writer
(``daemon.podsignal.PodSignal``). The clique entry stays NotReady throughout: 18 daemons' patches
of one clique object are what the prepare no longer waits for.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import random
import time
import uuid

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from compute_domains.api import imexsignal, names
from compute_domains.api.clique import (
    CliqueDaemon,
    ComputeDomainClique,
    ComputeDomainCliqueResource,
)
from compute_domains.api.computedomain import ComputeDomain, Readiness
from compute_domains.daemon import podsignal
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff, errors
from compute_domains.plugin import computedomain
from tests.integration.helpers import wait_for
from tests.integration.plugin.conftest import Namespaces

pytestmark = pytest.mark.integration
CLIQUE = "3f9a7c1e-0000-4000-8000-00000000c11e.7"
FAST = backoff.Backoff(initial=0.05, maximum=0.5)


def _cd() -> ComputeDomain:
    return ComputeDomain.from_dict(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.COMPUTE_DOMAIN_KIND,
            "metadata": {"name": "sig", "namespace": "user", "uid": str(uuid.uuid4())},
            "spec": {"channel": {"resourceClaimTemplate": {"name": "sig"}}},
        }
    )


async def _clique_entry(
    admin: AsyncClient, ns: str, cd: ComputeDomain, node: str, ready: bool
) -> None:
    """The CD's clique with ``node``'s entry, as the controller and its daemon wrote it."""
    empty = ComputeDomainClique.new(domain_uid=cd.uid, clique_id=CLIQUE, namespace=ns)
    entry = CliqueDaemon(
        node_name=node,
        ip_address="127.9.1.1",
        clique_id=CLIQUE,
        status=Readiness.READY if ready else Readiness.NOT_READY,
    )
    await admin.create(ComputeDomainClique(metadata=empty.metadata, daemons=(entry,)).to_resource())


async def _serving_pod(
    admin: AsyncClient,
    ns: str,
    node: str,
    cd: ComputeDomain,
    *,
    program: str = "cdctl",
    declared: bool = True,
) -> str:
    """A pod of ``node`` labelled for ``cd`` (the agent's, after it took the CD up), its
    container running since the current second, as its kubelet reports it; ``declared``: its
    template says its daemon writes the signal (this version's agents and daemons)."""
    name = f"serving-{node}"
    body = {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {names.COMPUTE_DOMAIN_LABEL: cd.uid},
            "annotations": dict(imexsignal.DECLARED) if declared else {},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "command": [program]}
            ],
        },
    }
    await admin.create(Pod.from_dict(body))
    await _run_container(admin, ns, name, since=time.time(), restarts=0)
    return name


async def _run_container(
    admin: AsyncClient, ns: str, name: str, *, since: float, restarts: int
) -> None:
    """The kubelet's report: the container's current run started at ``since`` (to the second)."""
    started = datetime.datetime.fromtimestamp(since, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "imageID": "",
                "ready": True,
                "restartCount": restarts,
                "state": {"running": {"startedAt": started}},
            }
        ],
    }
    await admin.patch(Pod.Status, name, {"status": status}, namespace=ns)


def _writer(
    admin: AsyncClient, ns: str, pod: str, node: str, cd: ComputeDomain
) -> podsignal.PodSignal:
    ident = Identity(
        node_name=node,
        pod_name=pod,
        pod_namespace=ns,
        pod_uid="",
        clique_id=CLIQUE,
        domain_uid=cd.uid,
        domain_name=cd.name,
        domain_namespace=cd.namespace,
    )
    return podsignal.PodSignal(admin, ident, retry=FAST, rng=random.Random(1))


async def _signal(admin: AsyncClient, ns: str, pod: str, cd: ComputeDomain) -> str | None:
    found = await admin.get(Pod, pod, namespace=ns)
    return ((found.metadata.annotations if found.metadata else None) or {}).get(
        imexsignal.key(cd.uid)
    )


async def _entry_status(admin: AsyncClient, ns: str, cd: ComputeDomain, node: str) -> Readiness:
    raw = await admin.get(
        ComputeDomainCliqueResource, names.clique_object_name(cd.uid, CLIQUE), namespace=ns
    )
    entry = ComputeDomainClique.from_resource(raw).daemon(node)
    assert entry is not None
    return entry.status


async def test_a_prepare_returns_on_the_serving_pods_signal_while_the_clique_entry_is_not_ready(
    admin: AsyncClient, spaces: Namespaces
) -> None:
    """The prepare's wait returns once the serving pod's process signals its IMEX Ready, with
    the clique entry still NotReady; a signal left by the process before a restart of the
    container (``kill -9``: no removal) is not taken, and the new process's is."""
    ns, cd = spaces.driver, _cd()
    node = f"ghost-{uuid.uuid4().hex[:8]}"  # no kubelet: the test plays it
    domains = computedomain.Domains(admin, node=node, driver_namespace=ns)
    await _clique_entry(admin, ns, cd, node, ready=False)
    pod = await _serving_pod(admin, ns, node, cd)
    with pytest.raises(errors.TemporaryError, match="has not signalled its IMEX Ready"):
        await domains.wait_ready(cd, CLIQUE, 0.5)

    writer = _writer(admin, ns, pod, node, cd)  # the serving process, started after its container
    writing = asyncio.create_task(writer.run())
    waiting = asyncio.create_task(domains.wait_ready(cd, CLIQUE, 30))
    writer.set(True)  # its own IMEX check passed
    await asyncio.wait_for(waiting, 30)
    assert await _entry_status(admin, ns, cd, node) is Readiness.NOT_READY
    left = await _signal(admin, ns, pod, cd)
    assert left is not None

    # kill -9: the process dies without removing its signal; the kubelet restarts the container.
    writing.cancel()
    await asyncio.gather(writing, return_exceptions=True)  # (its removal, undone below)
    body = {"metadata": {"annotations": {imexsignal.key(cd.uid): left}}}
    await admin.patch(Pod, pod, body, namespace=ns, patch_type=PatchType.MERGE)
    written = imexsignal.decode(left)
    assert written is not None
    restart = math.floor(written.at.timestamp()) + 1  # the new run begins after the kill
    await _run_container(admin, ns, pod, since=restart, restarts=1)
    with pytest.raises(errors.TemporaryError, match="left by a previous process"):
        await domains.wait_ready(cd, CLIQUE, 0.5)

    # The restarted process (it starts once its container has: the wall clock passes the
    # restart's second before it exists) signals its own IMEX instance: that one counts.
    await asyncio.sleep(max(0.0, restart - time.time()))
    again = _writer(admin, ns, pod, node, cd)
    rewriting = asyncio.create_task(again.run())
    try:
        waiting = asyncio.create_task(domains.wait_ready(cd, CLIQUE, 30))
        again.set(True)
        await asyncio.wait_for(waiting, 30)
        fresh = imexsignal.decode(await _signal(admin, ns, pod, cd))
        assert fresh is not None and fresh.imex != written.imex
        # Its own check failing takes the signal away, and the prepare waits again.
        again.set(False)
        key = imexsignal.key(cd.uid)
        await wait_for(
            admin,
            Pod,
            pod,
            lambda p: key not in ((p.metadata.annotations if p.metadata else None) or {}),
            namespace=ns,
            timeout=30,
        )
        with pytest.raises(errors.TemporaryError, match="has not signalled its IMEX Ready"):
            await domains.wait_ready(cd, CLIQUE, 0.5)
    finally:
        rewriting.cancel()
        await asyncio.gather(rewriting, return_exceptions=True)
    assert await _signal(admin, ns, pod, cd) is None  # removed when the writer stops


async def test_a_ready_clique_entry_counts_only_where_no_pod_of_ours_serves_the_cd(
    admin: AsyncClient, spaces: Namespaces
) -> None:
    """The entry is still what counts where no pod that writes the signal serves the CD: NVIDIA's
    daemon pod of a domain NVIDIA formed, a daemon pod of an older version (its DaemonSet is
    never updated; its template does not declare the signal), or none yet. A pod that declares
    it serving the CD without a signal (its agent killed, its entry still Ready) holds the
    prepare back."""
    ns = spaces.driver
    cases = (
        (imexsignal.NVIDIA_DAEMON_PROGRAM, False, True),
        ("cdctl", False, True),
        ("cdctl", True, False),
        ("", False, True),
    )
    for program, declared, passes in cases:
        cd = _cd()
        node = f"ghost-{uuid.uuid4().hex[:8]}"
        domains = computedomain.Domains(admin, node=node, driver_namespace=ns)
        await _clique_entry(admin, ns, cd, node, ready=True)
        if program:
            await _serving_pod(admin, ns, node, cd, program=program, declared=declared)
        if passes:
            await domains.wait_ready(cd, CLIQUE, 30)
        else:
            with pytest.raises(errors.TemporaryError, match="has not signalled its IMEX Ready"):
                await domains.wait_ready(cd, CLIQUE, 1.0)
