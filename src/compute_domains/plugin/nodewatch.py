"""Follow this node's holder labels with a watch on the plugin's own Node.

Two labels decide what the channel slots advertise (``holder``) and which claims are refused
(``holder.check_free_for``):
- ``compute-domains/warm-for=<CD UID>`` (issue 16): the controller labels the nodes a
  ComputeDomain's ``compute-domains/warm-nodes`` annotation selects;
- ``compute-domains/shared-imex=on`` (issue 26): the node runs its clique's shared IMEX (this
  plugin writes it; an operator may remove it).
The plugin learns both from one list+watch of its own Node (field selector ``metadata.name``;
chart RBAC: nodes get/list/watch), never by polling: ``infra.kube.watch.stream`` resumes and
re-lists, and each state seen is passed on, so a label set or removed reaches the
ResourceSlice within one watch event. The whole Node seen is passed on too (``on_node``): the
per-clique scope's first Node write of a prepare carries its resourceVersion instead of reading
the Node first (``shared``). The Node gone (a re-list without it) means no labels.
Given the host's shared caches (a virtual node), it follows the Node in the host's one Node
cache instead (``infra.kube.informers.follow``), with the same outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from compute_domains.api import names, sharedimex
from compute_domains.infra.kube import informers
from compute_domains.infra.kube import watch as kube_watch
from compute_domains.plugin import holder

logger = logging.getLogger(__name__)


def node_labels(node: Any) -> holder.NodeLabels:
    """The holder labels of a Node (none when absent or the node is None)."""
    meta = node.metadata if node is not None else None
    labels = (meta.labels if meta is not None else None) or {}
    return holder.NodeLabels(
        warm_for=str(labels.get(names.WARM_FOR_LABEL, "")),
        shared_imex=labels.get(sharedimex.SHARED_IMEX_LABEL) == sharedimex.SHARED_IMEX_ON,
    )


class NodeWatch:
    """Calls ``on_change`` with the Node's holder labels whenever they change."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        node: str,
        on_change: Callable[[holder.NodeLabels], None],
        shared: informers.Informers | None = None,
        on_node: Callable[[Any], None] | None = None,
    ) -> None:
        """``on_node``: also called with every state of the Node seen (None: gone), before
        ``on_change`` (``shared.Shared.node_seen``)."""
        self._client = client
        self._on_node = on_node
        self._shared = shared
        self._node = node
        self._on_change = on_change
        self._value: holder.NodeLabels | None = None
        self.synced = asyncio.Event()
        """Set once the first list was seen."""

    def _seen_node(self, node: Any) -> None:
        if self._on_node is not None:
            self._on_node(node)
        self._seen(node_labels(node))

    def _seen(self, value: holder.NodeLabels) -> None:
        if value != self._value:
            before = self._value or holder.NodeLabels()
            if value.warm_for != before.warm_for:
                logger.info(
                    "node warm-spare label %s: %s",
                    names.WARM_FOR_LABEL,
                    value.warm_for or "none",
                    extra={"node": self._node},
                )
            if value.shared_imex != before.shared_imex:
                logger.info(
                    "node shared-IMEX label %s: %s",
                    sharedimex.SHARED_IMEX_LABEL,
                    sharedimex.SHARED_IMEX_ON if value.shared_imex else "none",
                    extra={"node": self._node},
                )
            self._value = value
            self._on_change(value)
        self.synced.set()

    async def run(self) -> None:
        """Follow the Node until cancelled."""
        if self._shared is not None:
            nodes = informers.nodes(self._shared)
            async for node in informers.follow(nodes, ("", self._node)):
                self._seen_node(node)
            return
        async for item in kube_watch.stream(
            self._client,
            Node,
            name=f"node:{self._node}",
            fields={"metadata.name": self._node},
        ):
            if isinstance(item, kube_watch.Listed):
                self._seen_node(item.objects[0] if item.objects else None)
            elif item.type == "DELETED":
                self._seen_node(None)
            else:
                self._seen_node(item.obj)
