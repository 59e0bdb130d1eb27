"""An idle resident agent on a clique node, with eager shared IMEX, is not Ready before its
Node's shared-IMEX label, and never NotReady again once Ready (issue 28), against the real API
server.

During ``helm install`` with ``imex.agents=resident`` and ``imex.scope=perClique`` the agent
pods went Ready → NotReady → Ready on every node whose agent passed its probe before the
node's kubelet plugin wrote its eager ``compute-domains/shared-imex=on`` label (20 to 41 of 72
virtual nodes): Ready idle, then NotReady while the newly asked shared IMEX started, then Ready.
Here the agent runs as the chart runs it with that scope (``SHARED_IMEX_EAGER``), in this
process with the IMEX stand-in in-process, on a Node the test made (no kubelet serves it) that
carries a clique ID; the test plays the plugin and writes the label only once the agent has
read the Node and acted on it. ``/readyz`` is asked over HTTP as a kubelet prober would, every
50 ms: it must fail until the label came and the shared IMEX passed its own check, then pass at
every later answer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from compute_domains.agent.config import AgentSettings
from compute_domains.api import sharedimex
from tests.integration.daemon import agents
from tests.unit.sim.test_imex import _free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

IP = "127.0.0.44"
CLIQUE_ID = "5b1c0d6e-0000-4000-8000-00000000001c.1"
IDLE_ANSWERS = 10
"""Answers of the settled idle agent checked before the label is written."""
READY_ANSWERS = 40
"""Answers after the first pass that must all pass (past several own IMEX checks)."""


@pytest.fixture
async def node(admin: AsyncClient) -> AsyncIterator[str]:
    """A Node with a clique ID and nothing asked of its agent; no kubelet serves it."""
    async with agents.clique_node(admin, "eager", CLIQUE_ID) as name:
        yield name


async def test_an_idle_agent_waits_for_the_eager_label_and_then_stays_ready(
    admin: AsyncClient, driver_ns: str, node: str, tmp_path: Path
) -> None:
    pod = await agents.agent_pod(admin, driver_ns, "imex-agent-eager", node, IP)
    port = _free_port((IP,))
    settings = AgentSettings(
        node_name=node,
        pod_name="imex-agent-eager",
        pod_namespace=driver_ns,
        pod_ip=IP,
        metrics_port=port,
        domains_dir=tmp_path / "domains",
        shared_imex_eager=True,
    )
    agent = agents.agent(settings, admin, tmp_path, pod)
    prober = agents.Prober(IP, port)
    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(agent.run()),
        asyncio.create_task(prober.run()),
    ]
    try:
        # The agent read its Node (a clique ID, nothing asked) and acted on it: it runs nothing.
        await agents.until(
            lambda: (
                agent._settled
                and not agent._changed.is_set()
                and agent._wanted.clique_id == CLIQUE_ID
            ),
            30,
        )
        seen = len(prober.answers)
        await prober.until(lambda a: len(a) >= seen + IDLE_ANSWERS, 30)
        assert not any(prober.answers), "Ready while its Node's shared-IMEX label is to come"
        assert agent.shared is None and agent.daemon is None

        # The plugin's eager label: the agent starts the clique's shared IMEX.
        patch = {"metadata": {"labels": {sharedimex.SHARED_IMEX_LABEL: sharedimex.SHARED_IMEX_ON}}}
        await admin.patch(Node, node, patch, patch_type=PatchType.MERGE)
        await prober.until(any, 60)
        first = prober.answers.index(True)
        assert agent.shared is not None and agent.shared.health.ok, (
            "Ready before the shared IMEX passed its own check"
        )
        await prober.until(lambda a: len(a) >= first + READY_ANSWERS, 30)
        after = prober.answers[first:]
        assert all(after), f"Ready, then NotReady again: {after}"
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
