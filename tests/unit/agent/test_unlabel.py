"""A stop whose bounded unlabel did not end leaves no CD label on the agent's pod.

Seen in a formation benchmark under load (2 cores, load 15-25): one agent's unlabel PATCH of a
deleted CD hung past ``stop_timeout`` (20 s), the agent logged "could not unlabel our pod" and
never tried again; its pod kept the CD's labels, the controller kept counting it for that CD,
and the benchmark's teardown ("no daemon pod of the CD remains") never ended. Once the daemon
has stopped, the unlabel is done again, with retries.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.agent import app
from compute_domains.agent.config import AgentSettings, Assignment, Domain, Wants
from compute_domains.api import names
from compute_domains.daemon.config import DaemonSettings


class _Client:
    """The pod's label patches: the first one never answers; the others do."""

    def __init__(self) -> None:
        self.calls = 0
        self.applied: list[Any] = []

    async def patch(self, *args: Any, **kwargs: Any) -> Pod:
        self.calls += 1
        if self.calls == 1:
            await asyncio.Event().wait()  # a request the API server never answers
        self.applied.append(args[2])
        return Pod(metadata=ObjectMeta(name=args[1], annotations={}))  # the pod as written


def _no_daemon(_domain: Domain) -> DaemonSettings:
    raise AssertionError("nothing is started here")


async def test_a_stop_whose_unlabel_timed_out_unlabels_once_the_daemon_stopped() -> None:
    settings = AgentSettings(
        node_name="n", pod_name="agent-n", pod_namespace="ns", stop_timeout=0.05
    )
    client = _Client()
    agent = app.ResidentAgent(settings, cast(AsyncClient, client), daemon_settings=_no_daemon)
    # Serving CD X (its daemon a task that ends when cancelled), as Runner.start leaves it.
    agent._runner.running = Assignment(domain_uid="x", clique_id="c.1")
    agent._runner.task = asyncio.create_task(asyncio.Event().wait())
    serving = asyncio.create_task(agent._serve())
    try:
        agent._wanted = Wants(clique_id="c.1")  # X's label left the Node: stop serving it
        agent._changed.set()
        async with asyncio.timeout(10):
            while not (agent._settled and agent._runner.running is None):
                await asyncio.sleep(0)  # let the serve loop act (no wall-clock wait)
        unlabel = {
            "metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None, names.CLIQUE_ID_LABEL: None}}
        }
        assert client.applied == [unlabel], "the pod kept the CD's labels"
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
