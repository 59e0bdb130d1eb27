"""Wait until this node's IMEX of a per-domain CD runs: the serving pod's readiness signal.

The signal (``api.imexsignal``, docs/decisions/0023) is an annotation on the pod that serves
the CD on this node (the resident agent's pod, or the per-CD daemon pod), written only by that
pod's process once its own IMEX check passes. :class:`NodeSignals` follows the driver
namespace's pods bound to this node and labelled for the CD: a list, then a watch from the
list's version (``infra.kube.watch.stream``, with that label and ``spec.nodeName`` selected),
or, on a virtual node, the host's one cache of bound pods (``infra.kube.informers.bound_pods``,
indexed by node), so a host adds no watch for it.

:meth:`NodeSignals.wait` returns once either holds:

- a serving pod's signal counts (``imexsignal.judge``: written by the process that runs now);
- no pod that writes the signal serves the CD here (none labelled for it, or only pods whose
  template does not declare it, ``imexsignal.DECLARED``: a daemon of an older version, whose
  DaemonSet is never updated, or NVIDIA's daemon of a domain NVIDIA formed) and the clique
  entry the caller follows (``entry_ready``) is Ready: the wait the prepare had before the
  signal, kept for those pods and for a node whose pod is not labelled yet. Once a pod that
  declares the signal serves the CD here, only its signal counts: a Ready entry left by a
  killed agent does not.

The entry follower runs beside the pods' from the start, so neither waits for the other.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.api import imexsignal, names
from compute_domains.infra.kube import cache, informers, watch


class NodeSignals:
    """The readiness signals of one node's serving pods (module docstring).

    Args:
        client: API client (the plugin's ServiceAccount).
        node: this node.
        driver_namespace: where the agents and daemon pods run.
        pods: the host's bound-pod cache (``informers.bound_pods``); None: list and watch.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        node: str,
        driver_namespace: str,
        pods: cache.Cache[Any] | None = None,
    ) -> None:
        self._client = client
        self._node = node
        self._ns = driver_namespace
        self._pods = pods

    async def serving_pods(self, domain_uid: str) -> AsyncIterator[list[Any]]:
        """The driver namespace's pods on this node labelled for ``domain_uid``, now (once the
        list or cache is complete) and after every change."""
        node, ns = self._node, self._ns

        def labelled(pod: Any) -> bool:
            meta = pod.metadata
            return (
                meta is not None
                and meta.namespace == ns
                and (meta.labels or {}).get(names.COMPUTE_DOMAIN_LABEL) == domain_uid
            )

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
                    yield [p for p in shared.by_index(informers.NODE_INDEX, node) if labelled(p)]
                    await changed.wait()
            finally:
                unsubscribe()
        found: dict[str, Any] = {}
        async for item in watch.stream(
            self._client,
            Pod,
            name=f"IMEX signals of CD {domain_uid} on {node}",
            namespace=ns,
            labels={names.COMPUTE_DOMAIN_LABEL: domain_uid},
            fields={"spec.nodeName": node},
        ):
            if isinstance(item, watch.Listed):
                found = {p.metadata.name: p for p in item.objects if p.metadata is not None}
            elif item.obj.metadata is not None:
                if item.type == "DELETED":
                    found.pop(item.obj.metadata.name, None)
                else:
                    found[item.obj.metadata.name] = item.obj
            yield list(found.values())

    async def wait(
        self,
        domain_uid: str,
        entry_ready: Callable[[], Coroutine[Any, Any, None]],
        why: list[str],
    ) -> None:
        """Return once the node's IMEX of ``domain_uid`` runs (module docstring); the caller
        bounds it. ``why`` gets, after every change, why it does not yet (for a timeout's text).
        """
        node, ns = self._node, self._ns
        state = {"ours": True, "entry": False}
        changed = asyncio.Event()

        async def pods() -> None:
            async for now in self.serving_pods(domain_uid):
                mine = [
                    p
                    for p in now
                    if imexsignal.serves(p, domain_uid=domain_uid, node=node, namespace=ns)
                ]
                verdicts = [
                    imexsignal.judge(p, domain_uid=domain_uid, node=node, namespace=ns)
                    for p in mine
                ]
                if "" in verdicts:
                    return
                state["ours"] = bool(mine)
                why[:] = verdicts or [f"no pod with a readiness signal serves the CD on {node} yet"]
                changed.set()

        async def entry() -> None:
            await entry_ready()
            state["entry"] = True
            changed.set()

        async def fallback() -> None:
            while True:
                await changed.wait()
                changed.clear()
                if state["entry"] and not state["ours"]:
                    return

        tasks = [
            asyncio.create_task(pods(), name=f"imex-signal {domain_uid}"),
            asyncio.create_task(_then_wait(entry()), name=f"clique-entry {domain_uid}"),
            asyncio.create_task(fallback(), name=f"entry-fallback {domain_uid}"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # a follower's API failure (the entry's never ends otherwise)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def _then_wait(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work``, then wait to be cancelled (its end must not end the wait by itself)."""
    await work
    await asyncio.Event().wait()
