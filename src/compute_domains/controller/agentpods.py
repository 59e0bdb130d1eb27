"""The controller's view of the resident IMEX agents' pods (per-clique readiness, issue 26).

A per-clique CD's entry is a copy of its node's entry in the clique's shared registry, which
the node's agent writes; ``sharedstatus`` counts it Ready only while that node's agent pod is
Ready with the entry's IP (``api.agentpods`` says why). This module keeps the cache that rule
reads: the pods labelled ``app.kubernetes.io/component=imex-agent`` in the driver namespace,
indexed by node, one list+watch for the whole controller (no watch per CD or per node).

Routing: a change of an agent pod's readiness, IP or node (or the pod coming or going) goes,
after the coalescing delay, to every CD its node serves by channel (the Node's
``compute-domains/channel.<cdUID>`` annotations), so a ``kill -9`` of an agent turns those CDs
NotReady within the delay, and its pod Ready again (same IP, same slot) turns them back.
Per-domain CDs are not routed here: their agent pods carry the CD label and are the daemon
pods of ``caches`` (their status already needs the pod Ready).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from lightkube.resources.core_v1 import Node, Pod

from compute_domains.api import agentpods, sharedimex
from compute_domains.controller import config, informer, kubeapi

NODE_INDEX = "node"

Enqueue = Callable[[str, float], None]


def _node(obj: Any) -> Iterable[str]:
    node = obj.spec.nodeName if obj.spec is not None else None
    return (node,) if node else ()


def _summary(pod: Pod | None) -> agentpods.AgentPod | None:
    return agentpods.AgentPod.from_pod(pod) if pod is not None else None


class AgentPods:
    """The agent pods' cache and its routing to the per-clique CDs their nodes serve."""

    def __init__(
        self,
        api: kubeapi.Api,
        settings: config.ControllerSettings,
        enqueue: Enqueue,
        node: Callable[[str], Node | None],
    ) -> None:
        """``node``: the cached Node of a name (``caches``' Node informer)."""
        self._enqueue = enqueue
        self._node = node
        self._coalesce = settings.status_coalesce_s
        self.informer: informer.Informer[Pod] = informer.Informer(
            api,
            Pod,
            name="agent-pods",
            namespace=settings.namespace,
            labels=agentpods.LABELS,
            indexers={NODE_INDEX: _node},
            on_change=self._changed,
            watch_timeout_s=settings.watch_timeout_s,
        )

    def on(self, node: str) -> list[agentpods.AgentPod]:
        """The cached agent pods bound to ``node``."""
        return [agentpods.AgentPod.from_pod(p) for p in self.informer.by_index(NODE_INDEX, node)]

    def of(self, nodes: Iterable[str]) -> list[agentpods.AgentPod]:
        """The cached agent pods bound to any of ``nodes``."""
        return [p for node in sorted(set(nodes) - {""}) for p in self.on(node)]

    def _changed(self, old: Pod | None, new: Pod | None) -> None:
        before, after = _summary(old), _summary(new)
        if before == after:
            return  # e.g. an annotation the agent wrote, or its metrics' scrape marks
        uids: set[str] = set()
        for summary in (before, after):
            if summary is None or not summary.node_name:
                continue
            node = self._node(summary.node_name)
            if node is not None and node.metadata is not None:
                uids |= set(sharedimex.channels(node.metadata.annotations))
        for domain_uid in uids:
            self._enqueue(domain_uid, self._coalesce)
