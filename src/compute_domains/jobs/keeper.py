"""Keep a launched job whole: replace each lost rank in its own domain as soon as it is lost.

``Keeper.run()`` is the long-running form of ``launcher.replace_lost`` (the guide's §15.6
timeline: "the training framework detects rank 5 lost → creates a replacement pod pinned to
Domain A"). It follows the job's pods and the nodes by watch (``infra.kube.watch``), and after
every change derives the ranks (``ranks.rank_states``) from what it holds in memory and replaces
the lost ones (``launcher.replace``).

Invariants:
- Nothing is decided before both watches delivered their first list.
- The keeper's own writes enter its memory at once (the replacement as built, the force-deleted
  pods removed), so the pass that follows a replacement never sees the rank still lost and
  never creates a second pod for it; the watch then brings the API server's version.
- A failed API request is logged and the pass runs again after a backoff; the keeper stops only
  when cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lightkube.resources.core_v1 import Node, Pod

from compute_domains.infra import backoff, errors, tasks
from compute_domains.infra.kube import watch
from compute_domains.jobs import kubeio, launcher, plan, ranks
from compute_domains.jobs import spec as specs

logger = logging.getLogger(__name__)

_RETRY = backoff.Backoff(initial=0.5, maximum=30.0)


def _name(obj: Pod | Node) -> str:
    return str(obj.metadata.name) if obj.metadata else ""


class Keeper:
    """Replaces the job's lost ranks as they are lost (module docstring)."""

    def __init__(
        self,
        api: kubeio.Api,
        spec: specs.JobSpec,
        on_replaced: Callable[[launcher.Replaced], None] | None = None,
    ) -> None:
        self._api, self._spec = api, spec
        self._on_replaced = on_replaced
        self._uuids = [specs.domain_of(spec, r).cluster_uuid for r in range(spec.world_size)]
        self._pods: dict[str, Pod] = {}
        self._nodes: dict[str, Node] = {}
        self._synced: set[str] = set()
        self._dirty = asyncio.Event()

    async def run(self) -> None:
        """Follow pods and nodes, replace lost ranks; returns only by cancellation."""
        job = f"{self._spec.namespace}/{self._spec.name}"
        async with asyncio.TaskGroup() as tg:
            tasks.spawn(tg, f"keeper {job}: pods", self._follow_pods, log=logger)
            tasks.spawn(tg, f"keeper {job}: nodes", self._follow_nodes, log=logger)
            tasks.spawn(tg, f"keeper {job}: replace", self._replace_loop, log=logger)

    async def _follow_pods(self) -> None:
        s = self._spec
        async for item in watch.stream(
            self._api.client,
            Pod,
            name=f"job-{s.name}-pods",
            namespace=s.namespace,
            labels={plan.JOB_LABEL: s.name},
        ):
            self._apply(self._pods, item, "pods")

    async def _follow_nodes(self) -> None:
        async for item in watch.stream(self._api.client, Node, name=f"job-{self._spec.name}-nodes"):
            self._apply(self._nodes, item, "nodes")

    def _apply(self, into: dict[str, Pod] | dict[str, Node], item: object, kind: str) -> None:
        if isinstance(item, watch.Listed):
            into.clear()
            into.update({_name(o): o for o in item.objects})
            self._synced.add(kind)
        elif isinstance(item, watch.Changed):
            if item.type == "DELETED":
                into.pop(_name(item.obj), None)
            else:
                into[_name(item.obj)] = item.obj
        self._dirty.set()

    async def _replace_loop(self) -> None:
        attempt = 0
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self._synced != {"pods", "nodes"}:
                continue
            try:
                await self.replace_lost()
                attempt = 0
            except errors.ComputeDomainsError as err:
                delay = _RETRY.delay(attempt)
                attempt += 1
                logger.warning(
                    "keeper %s: replacing failed, again in %.1fs: %s", self._spec.name, delay, err
                )
                await asyncio.sleep(delay)  # back off a failing API; then the pass runs again
                self._dirty.set()

    async def replace_lost(self) -> list[launcher.Replaced]:
        """One pass over the ranks held in memory: replace every lost one."""
        states = ranks.rank_states(self._uuids, self._pods.values(), self._nodes.values())
        done = []
        for state in states:
            if not state.is_lost:
                continue
            replaced = await launcher.replace(self._api, self._spec, state)
            for pod, _ in state.lost:
                self._pods.pop(_name(pod), None)
            self._pods[replaced.pod] = plan.rank_pod(self._spec, state.rank, state.next_generation)
            done.append(replaced)
            if self._on_replaced is not None:
                self._on_replaced(replaced)
        return done
