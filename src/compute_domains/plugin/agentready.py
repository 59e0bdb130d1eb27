"""Wait until this node's entry in its clique's shared registry is Ready *and* backed by a Ready
agent pod (``api.agentpods``: a ``kill -9`` of the agent leaves the entry Ready until its
restarted process registers, while its shared IMEX is already gone and its pod NotReady).

Two things are followed at once (``Following``, one background task), and a wait returns the
moment both hold:

- the registry ``shared-imex.<C>``: a read, then a watch from it (or, with the host's shared
  caches, its clique cache, as ``computedomain.follow`` does);
- the agent pods on this node (label ``app.kubernetes.io/component=imex-agent``, driver
  namespace): a watch selected by that label and ``spec.nodeName`` (its first events list the
  current ones), or, on a virtual node, the host's one cache of bound pods (``infra.kube.
  informers.bound_pods``, indexed by node), so a host adds no watch and no LIST for it.

``Waited`` keeps the last state seen of each, so a wait that times out can say which of the
two it waited for. A ``Following`` also keeps the registry object itself, so the channel
allocation of the same prepare plans from it instead of reading the registry again
(``registry``): a per-clique prepare starts following as soon as it knows the CD's scope, and
the reads and watches run while it writes the channel and the Node's marks, instead of after.
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


class Following:
    """Both followers of one registry, run as one background task while any prepare of this
    node needs them (``AgentReady.following``); several prepares at once share one."""

    def __init__(self, ready: AgentReady, registry_name: str) -> None:
        self._ready = ready
        self._name = registry_name
        self.seen = Waited()
        """The newest entry and agent pods seen (also the timeout's error text)."""
        self.registry: Any | None = None
        """The registry as last seen (None while absent); valid once ``synced`` is set."""
        self.synced = asyncio.Event()
        """Set once the registry was read the first time (or a follower failed)."""
        self.users = 0
        """Prepares holding this follower open (``registry.Registry.following``)."""
        self._changed = asyncio.Condition()
        self._failure: Exception | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start following (a background task until ``stop``)."""
        self._task = asyncio.create_task(self._run(), name=f"follow {self._name}")

    async def stop(self) -> None:
        """Stop following; waits for the followers to end."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we are cancelled ourselves, not only our follower

    @property
    def ended(self) -> bool:
        """Whether the followers stopped on their own (an API failure), never to change again."""
        return self._task is not None and self._task.done()

    async def wait_ended(self) -> None:
        """Return once the followers stopped on their own (``ended``); never cancels them."""
        task = self._task
        if task is not None:
            await asyncio.wait({task})

    async def registry_now(self) -> Any | None:
        """The registry as last seen, after its first read.

        Raises:
            kube.KubeError: a follower's API failure (or what else ended it).
        """
        await self.synced.wait()
        self._raise_failure()
        return self.registry

    async def until_ready(self, node: str) -> None:
        """Return once ``seen.ready(node)`` holds (the caller bounds it).

        Raises:
            kube.KubeError: a follower's API failure.
        """
        async with self._changed:
            await self._changed.wait_for(lambda: self._failure is not None or self.seen.ready(node))
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _run(self) -> None:
        ready = self._ready

        async def entries() -> None:
            async for obj in ready.registry_states(self._name):
                found = ComputeDomainClique.from_resource(obj) if obj is not None else None
                self.registry = obj
                self.seen.entry = found.daemon(ready.node) if found is not None else None
                self.synced.set()
                await self._notify()

        async def pods() -> None:
            async for now in ready.agent_pods():
                self.seen.pods = now
                await self._notify()

        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(entries())
                tg.create_task(pods())
        except* Exception as group:  # a follower's failure (the API's): the waiters' error
            self._failure = group.exceptions[0]
            self.synced.set()
            await self._notify()


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
        self.node = node
        self._ns = driver_namespace
        self._cliques = cliques
        self._pods = pods

    def following(self, registry_name: str) -> Following:
        """A follower of ``registry_name`` and this node's agent pods (not started yet)."""
        return Following(self, registry_name)

    async def registry_states(self, name: str) -> AsyncIterator[Any | None]:
        """The registry now (None while absent) and after every change."""
        with kube.translated(f"watching registry {self._ns}/{name}"):
            async for obj in computedomain.states(
                self._client, Registry, name, self._ns, self._cliques
            ):
                yield obj

    async def agent_pods(self) -> AsyncIterator[list[agentpods.AgentPod]]:
        """The agent pods on this node now and after every change."""
        node = self.node
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
