"""The resident agent's ``/readyz`` while what its Node asks is not acted on yet (issue 26).

A restarted agent (``kill -9``: the same pod, the same IP) finds its previous process's entry
still Ready in the shared registry; its pod must not read Ready before what the Node asks runs
again, or the registry's readers (``api.agentpods``) would count that stale entry.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from lightkube import AsyncClient

from compute_domains.agent import app
from compute_domains.agent.config import AgentSettings, Domain, Wants
from compute_domains.daemon.config import DaemonSettings


class _Client:
    """The API as far as an idle agent uses it: its pod's label patch."""

    def __init__(self) -> None:
        self.patches: list[tuple[Any, ...]] = []

    async def patch(self, *args: Any, **kwargs: Any) -> None:
        self.patches.append(args)


def _no_daemon(_domain: Domain) -> DaemonSettings:
    raise AssertionError("an idle Node asks for no daemon")


async def _until_ready(agent: app.ResidentAgent) -> None:
    async with asyncio.timeout(10):
        while not await agent._ready():
            await asyncio.sleep(0)  # let the serve loop act (no wall-clock wait)


async def test_readyz_fails_until_the_nodes_ask_is_read_and_acted_on() -> None:
    settings = AgentSettings(node_name="n", pod_name="agent-n", pod_namespace="ns")
    agent = app.ResidentAgent(settings, cast(AsyncClient, _Client()), daemon_settings=_no_daemon)
    assert not await agent._ready()  # restarted: its Node not read yet, so nothing may run
    serving = asyncio.create_task(agent._serve())
    try:
        agent._wanted = Wants()  # the Node read: it asks for nothing
        agent._changed.set()
        assert not await agent._ready()  # read, not acted on yet
        await _until_ready(agent)
        agent._changed.set()  # a new ask: not Ready until it is acted on
        assert not await agent._ready()
        await _until_ready(agent)
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
