"""A Ready resident agent stays Ready while per-domain CDs form on its node, switch and leave,
and a restarted one is not Ready before its CD's IMEX runs again, against the real API server.

Issue 28 ("last entry Ready → CD Ready"): at 2,304 nodes every clique entry of a per-domain CD
was Ready at 60.9 s, the CD only at 65.4 s. The controller counts an entry only while its
node's agent pod is Ready, and the agent failed ``/readyz`` from every new ask until the new
CD's IMEX passed its check: the kubelet's probe (period 5 s) saw it NotReady during the start
and Ready again only at its next run after the entry had turned Ready. A new CD's entry is new
(NotReady until its daemon's own check writes it Ready), so the agent's pod has no reason to go
NotReady for it.

What the readiness rule exists for is kept: an agent killed with ``kill -9`` restarts in the
same pod, with the same IP, and finds its previous process's entry still Ready; its ``/readyz``
fails until the CD's IMEX runs again (the second test: a fresh agent, which is what the
restarted container runs).

Each agent runs in this process with the IMEX stand-in in-process, for a pod on a Node the test
made (no kubelet serves either); the test plays the kubelet plugin (the Node's CD label) and
the controller (each CD's clique entry for the pod, made beforehand), and asks ``/readyz`` over
HTTP every 50 ms as a kubelet prober would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from compute_domains.agent import app
from compute_domains.agent.config import AgentSettings
from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import Readiness
from tests.integration.daemon import agents
from tests.integration.daemon.conftest import new_compute_domain
from tests.unit.sim.test_imex import _free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

IP = "127.0.0.45"
CLIQUE_ID = "5b1c0d6e-0000-4000-8000-00000000001d.1"
POD = "imex-agent-cds"
AFTER_ANSWERS = 20
"""Answers checked after the last change (past several own IMEX checks)."""


@pytest.fixture
async def node(admin: AsyncClient) -> AsyncIterator[str]:
    """A Node with a clique ID and nothing asked of its agent; no kubelet serves it."""
    async with agents.clique_node(admin, "cds", CLIQUE_ID) as name:
        yield name


async def _entry_for(admin: AsyncClient, ns: str, uid: str, node: str, status: Readiness) -> None:
    """The node's entry in CD ``uid``'s clique, as the controller writes it for the agent's pod
    label (``status``: NotReady; Ready is what a killed agent's entry still says)."""
    clique = ComputeDomainClique.new(domain_uid=uid, clique_id=CLIQUE_ID, namespace=ns)
    clique = clique.with_registered(node, IP, 2).with_status(node, status)
    await admin.create(clique.to_resource())


async def _entry(admin: AsyncClient, ns: str, uid: str, node: str) -> Readiness | None:
    name = names.clique_object_name(uid, CLIQUE_ID)
    try:
        raw = await admin.get(ComputeDomainCliqueResource, name, namespace=ns)
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise
    entry = ComputeDomainClique.from_resource(raw).daemon(node)
    return None if entry is None else entry.status


async def _until_entry(
    admin: AsyncClient, ns: str, uid: str, node: str, status: Readiness | None
) -> None:
    async with asyncio.timeout(60):
        while await _entry(admin, ns, uid, node) is not status:
            await asyncio.sleep(0.05)


async def _ask(admin: AsyncClient, node: str, uid: str | None) -> None:
    """The kubelet plugin's CD label on the Node (None: removed)."""
    patch = {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: uid}}}
    await admin.patch(Node, node, patch, patch_type=PatchType.MERGE)


@contextlib.asynccontextmanager
async def _running(agent: app.ResidentAgent, prober: agents.Prober) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(agent.run()), asyncio.create_task(prober.run())]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _settings(node: str, ns: str, port: int, tmp: Path) -> AgentSettings:
    return AgentSettings(
        node_name=node,
        pod_name=POD,
        pod_namespace=ns,
        pod_ip=IP,
        metrics_port=port,
        domains_dir=tmp / "domains",
    )


async def test_a_ready_agent_stays_ready_while_cds_form_switch_and_leave(
    admin: AsyncClient, driver_ns: str, compute_domain: Any, node: str, tmp_path: Path
) -> None:
    ns = driver_ns
    x = compute_domain.metadata.uid
    y = (await new_compute_domain(admin, ns)).metadata.uid
    for uid in (x, y):
        await _entry_for(admin, ns, uid, node, Readiness.NOT_READY)
    pod = await agents.agent_pod(admin, ns, POD, node, IP)
    port = _free_port((IP,))
    agent = agents.agent(_settings(node, ns, port, tmp_path), admin, tmp_path, pod)
    prober = agents.Prober(IP, port)
    async with _running(agent, prober):
        await prober.until(any, 30)  # idle, its Node read: Ready
        first = prober.answers.index(True)

        await _ask(admin, node, x)  # a CD forms on the node
        asked = len(prober.answers)
        await _until_entry(admin, ns, x, node, Readiness.READY)
        formed = len(prober.answers)
        assert agent.daemon is not None and agent.daemon.health.ok
        assert formed - asked >= 3, "no probe ran while the CD's IMEX started"

        await _ask(admin, node, y)  # the node switches to another CD
        await _until_entry(admin, ns, y, node, Readiness.READY)
        await _until_entry(admin, ns, x, node, None)  # the first one's daemon left

        await _ask(admin, node, None)  # the CD leaves the node
        await agents.until(lambda: agent.serving is None and agent._settled, 30)
        await _until_entry(admin, ns, y, node, None)
        seen = len(prober.answers)
        await prober.until(lambda a: len(a) >= seen + AFTER_ANSWERS, 30)
    after = prober.answers[first:]
    assert all(after), f"NotReady after the first Ready: {after}"


async def test_a_restarted_agent_is_not_ready_until_its_cds_imex_runs(
    admin: AsyncClient, driver_ns: str, compute_domain: Any, node: str, tmp_path: Path
) -> None:
    ns, x = driver_ns, compute_domain.metadata.uid
    # What a kill -9 of the agent serving X leaves: its entry Ready, its pod labelled for X,
    # the Node still asking for X.
    await _entry_for(admin, ns, x, node, Readiness.READY)
    await agents.agent_pod(admin, ns, POD, node, IP)
    labels = {names.COMPUTE_DOMAIN_LABEL: x, names.CLIQUE_ID_LABEL: CLIQUE_ID}
    patch = {"metadata": {"labels": labels}}
    pod = await admin.patch(Pod, POD, patch, namespace=ns, patch_type=PatchType.MERGE)
    await _ask(admin, node, x)
    port = _free_port((IP,))
    agent = agents.agent(_settings(node, ns, port, tmp_path), admin, tmp_path, pod)
    prober = agents.Prober(IP, port)
    async with _running(agent, prober):
        await prober.until(any, 60)
        first = prober.answers.index(True)
        assert agent.daemon is not None and agent.daemon.health.ok, (
            "Ready before the restarted agent's IMEX passed its own check"
        )
        assert first >= 3, f"no probe ran before its IMEX passed: {prober.answers}"
        seen = len(prober.answers)
        await prober.until(lambda a: len(a) >= seen + AFTER_ANSWERS, 30)
    assert all(prober.answers[first:]), f"NotReady after the first Ready: {prober.answers}"
