"""Wait until this node's entry in its clique's shared registry is Ready *and* backed by a Ready
agent pod (``api.agentpods``: a ``kill -9`` of the agent leaves the entry Ready until its
restarted process registers, while its shared IMEX is already gone and its pod NotReady).

Two things are followed at once, and the wait returns the moment both hold:

- the registry ``shared-imex.<C>``: a read, then a watch from it (or, with the host's shared
  caches, its clique cache, as ``computedomain.follow`` does);
- the agent pods on this node (label ``app.kubernetes.io/component=imex-agent``, driver
  namespace): a watch selected by that label and ``spec.nodeName`` (its first events list the
  current ones), or, on a virtual node, the host's one cache of bound pods (``infra.kube.
  informers.bound_pods``, indexed by node), so a host adds no watch and no LIST for it.

``Waited`` keeps the last state seen of each, so a wait that times out can say which of the
two it waited for.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.api import agentpods
from compute_domains.api.clique import CliqueDaemon, ComputeDomainClique
from compute_domains.api.clique import ComputeDomainCliqueResource as Registry
from compute_domains.api.computedomain import Readiness
from compute_domains.infra import kube
from compute_domains.infra.kube import cache, informers
from compute_domains.plugin import computedomain


@dataclasses.dataclass(kw_only=True, slots=True)
class Waited:
    """The newest state of what one wait follows."""

    entry: CliqueDaemon | None = None
    """This node's registry entry (None: no registry, or not registered)."""
    pods: list[agentpods.AgentPod] = dataclasses.field(default_factory=list)
    """The agent pods bound to this node."""

    def ready(self, node: str) -> bool:
        """Whether the entry is Ready and its agent pod (with its IP) is Ready."""
        entry = self.entry
        return (
            entry is not None
            and entry.status is Readiness.READY
            and agentpods.serving(self.pods, node=node, ip=entry.ip_address)
        )

    def agent_why(self, node: str) -> str:
        """Why the entry, Ready itself, is not backed by its agent pod ("" when it is, or when
        the entry is not Ready: then the shared IMEX itself is what is waited for)."""
        entry = self.entry
        if entry is None or entry.status is not Readiness.READY:
            return ""
        if agentpods.serving(self.pods, node=node, ip=entry.ip_address):
            return ""
        return agentpods.not_serving_text(self.pods, node=node, ip=entry.ip_address)


class AgentReady:
    """The combined wait of one node (module docstring)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        node: str,
        driver_namespace: str,
        cliques: cache.Cache[Any] | None = None,
        pods: cache.Cache[Any] | None = None,
    ) -> None:
        """``cliques``: the host's clique cache; ``pods``: the host's bound-pod cache
        (``informers.bound_pods``); None: watch on our own."""
        self._client = client
        self._node = node
        self._ns = driver_namespace
        self._cliques = cliques
        self._pods = pods

    async def wait(self, registry_name: str, seen: Waited) -> None:
        """Return once ``seen.ready`` holds (the caller bounds it; ``seen`` keeps the newest
        state for its error text)."""
        changed = asyncio.Event()

        async def entries() -> None:
            async for obj in self._registry(registry_name):
                found = ComputeDomainClique.from_resource(obj) if obj is not None else None
                seen.entry = found.daemon(self._node) if found is not None else None
                changed.set()

        async def pods() -> None:
            async for now in self._agent_pods():
                seen.pods = now
                changed.set()

        try:
            async with asyncio.TaskGroup() as tg:
                followers = [tg.create_task(entries()), tg.create_task(pods())]
                try:
                    while not seen.ready(self._node):
                        await changed.wait()
                        changed.clear()
                finally:
                    for task in followers:
                        task.cancel()
        except* kube.KubeError as group:  # a follower's API failure: the caller's error
            raise group.exceptions[0] from None

    async def _registry(self, name: str) -> AsyncIterator[Any | None]:
        """The registry now (None while absent) and after every change."""
        with kube.translated(f"watching registry {self._ns}/{name}"):
            async for obj in computedomain.states(
                self._client, Registry, name, self._ns, self._cliques
            ):
                yield obj

    async def _agent_pods(self) -> AsyncIterator[list[agentpods.AgentPod]]:
        """The agent pods on this node now and after every change."""
        node = self._node
        if self._pods is not None:
            shared = self._pods
            changed = asyncio.Event()
            unsubscribe = shared.subscribe(
                lambda _o, _n: changed.set(), index=informers.NODE_INDEX, value=node
            )
            try:
                await shared.synced.wait()
                while True:
                    changed.clear()
                    yield [
                        agentpods.AgentPod.from_pod(p)
                        for p in shared.by_index(informers.NODE_INDEX, node)
                        if p.metadata is not None
                        and p.metadata.namespace == self._ns
                        and agentpods.is_agent(p)
                    ]
                    await changed.wait()
            finally:
                unsubscribe()
        found: dict[str, agentpods.AgentPod] = {}
        yield []
        with kube.translated(f"watching the IMEX agent pods of node {node}"):
            # No resourceVersion: the watch first reports every current pod as ADDED.
            async for op, pod in self._client.watch(
                Pod,
                namespace=self._ns,
                labels=dict(agentpods.LABELS),
                fields={"spec.nodeName": node},
            ):
                summary = agentpods.AgentPod.from_pod(pod)
                if op == "DELETED":
                    found.pop(summary.name, None)
                else:
                    found[summary.name] = summary
                yield list(found.values())
