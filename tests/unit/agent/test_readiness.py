"""The resident agent's ``/readyz`` while what its Node asks is not acted on yet (issue 26).

A restarted agent (``kill -9``: the same pod, the same IP) finds its previous process's entry
still Ready in the shared registry (or its CD's clique); its pod must not read Ready before what
the Node asks runs again, or the entry's readers (``api.agentpods``, the controller's status)
would count that stale entry. Once Ready, a later ask does not fail it (issue 28: every new CD
cost a NotReady probe and the next one's Ready, up to 5 s, before the CD could read Ready).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.agent import app
from compute_domains.agent.config import AgentSettings, Domain, Wants
from compute_domains.daemon.config import DaemonSettings


class _Client:
    """The API as far as an idle agent uses it: its pod's label patch."""

    def __init__(self) -> None:
        self.patches: list[tuple[Any, ...]] = []

    async def patch(self, *args: Any, **kwargs: Any) -> Pod:
        self.patches.append(args)
        return Pod(metadata=ObjectMeta(name=args[1], annotations={}))  # the pod as written


def _no_daemon(_domain: Domain) -> DaemonSettings:
    raise AssertionError("an idle Node asks for no daemon")


async def _until_ready(agent: app.ResidentAgent) -> None:
    async with asyncio.timeout(10):
        while not await agent._ready():
            await asyncio.sleep(0)  # let the serve loop act (no wall-clock wait)


async def test_readyz_fails_until_the_first_ask_is_read_and_acted_on_and_not_after() -> None:
    settings = AgentSettings(node_name="n", pod_name="agent-n", pod_namespace="ns")
    agent = app.ResidentAgent(settings, cast(AsyncClient, _Client()), daemon_settings=_no_daemon)
    assert not await agent._ready()  # restarted: its Node not read yet, so nothing may run
    serving = asyncio.create_task(agent._serve())
    try:
        agent._wanted = Wants()  # the Node read: it asks for nothing
        agent._changed.set()
        assert not await agent._ready()  # read, not acted on yet
        await _until_ready(agent)
        agent._changed.set()  # a later ask: its new entry is NotReady until its IMEX passes
        assert await agent._ready()
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


@contextlib.asynccontextmanager
async def _serving(settings: AgentSettings) -> AsyncIterator[app.ResidentAgent]:
    """An agent whose serve loop runs (no daemon is ever started) for the block."""
    agent = app.ResidentAgent(settings, cast(AsyncClient, _Client()), daemon_settings=_no_daemon)
    serving = asyncio.create_task(agent._serve())
    try:
        yield agent
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


async def _settled(agent: app.ResidentAgent, wanted: Wants) -> None:
    """Hand the agent ``wanted`` as its Node's ask and wait until it acted on it."""
    agent._wanted = wanted
    agent._changed.set()
    async with asyncio.timeout(10):
        while agent._changed.is_set() or not agent._settled:
            await asyncio.sleep(0)


async def test_an_idle_agent_whose_node_will_ask_for_the_shared_imex_is_not_ready() -> None:
    # Issue 28: with eager shared IMEX the plugin labels the node at its start; an agent Ready
    # before that label went NotReady for the IMEX start and Ready again (a flap per node).
    settings = AgentSettings(
        node_name="n", pod_name="agent-n", pod_namespace="ns", shared_imex_eager=True
    )
    async with _serving(settings) as agent:
        await _settled(agent, Wants(clique_id="c.1"))
        assert not await agent._ready()  # the shared-IMEX label is still to come
        await _settled(agent, Wants())  # no clique ID: no shared IMEX will be asked
        assert await agent._ready()


async def test_without_eager_shared_imex_an_idle_agent_is_ready() -> None:
    settings = AgentSettings(node_name="n", pod_name="agent-n", pod_namespace="ns")
    async with _serving(settings) as agent:
        await _settled(agent, Wants(clique_id="c.1"))
        assert await agent._ready()  # per-domain scope: an idle clique node asks for nothing


async def test_once_ready_an_agent_awaiting_the_shared_imex_stays_ready() -> None:
    # Eager shared IMEX: NotReady while idle only before the first pass (issue 28); a node that
    # gets its clique ID later, or whose per-domain CD left, is not made NotReady by it.
    settings = AgentSettings(
        node_name="n", pod_name="agent-n", pod_namespace="ns", shared_imex_eager=True
    )
    async with _serving(settings) as agent:
        await _settled(agent, Wants())  # no clique ID: nothing will be asked
        assert await agent._ready()
        await _settled(agent, Wants(clique_id="c.1"))
        assert await agent._ready()
