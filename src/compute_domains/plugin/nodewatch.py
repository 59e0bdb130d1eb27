"""Follow this node's warm-spare label (issue 16) with a watch on the plugin's own Node.

The controller labels the nodes a ComputeDomain's ``compute-domains/warm-nodes`` annotation
selects with ``compute-domains/warm-for=<CD UID>``. The plugin must know it to advertise that CD
as the node's holder on its channel slots (``devices``) and to refuse another CD's channel
claim (``holder.check_free_for``). It learns it from one list+watch of its own Node (field
selector ``metadata.name``; chart RBAC: nodes get/list/watch), never by polling:
``infra.kube.watch.stream`` resumes and re-lists, and each state seen is passed on, so a label
set or removed reaches the ResourceSlice within one watch event. The Node gone (a re-list
without it) means no label.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from compute_domains.api import names
from compute_domains.infra.kube import watch as kube_watch

logger = logging.getLogger(__name__)


def warm_label(node: Any) -> str:
    """The warm-spare label's value on a Node ("" when absent or the node is None)."""
    meta = node.metadata if node is not None else None
    labels = (meta.labels if meta is not None else None) or {}
    return str(labels.get(names.WARM_FOR_LABEL, ""))


class NodeWatch:
    """Calls ``on_change`` with the warm-spare label's value whenever it changes."""

    def __init__(self, client: AsyncClient, *, node: str, on_change: Callable[[str], None]) -> None:
        self._client = client
        self._node = node
        self._on_change = on_change
        self._value: str | None = None
        self.synced = asyncio.Event()
        """Set once the first list was seen."""

    def _seen(self, value: str) -> None:
        if value != self._value:
            if self._value is not None or value:
                logger.info(
                    "node warm-spare label %s: %s",
                    names.WARM_FOR_LABEL,
                    value or "none",
                    extra={"node": self._node},
                )
            self._value = value
            self._on_change(value)
        self.synced.set()

    async def run(self) -> None:
        """Follow the Node until cancelled."""
        async for item in kube_watch.stream(
            self._client,
            Node,
            name=f"node:{self._node}",
            fields={"metadata.name": self._node},
        ):
            if isinstance(item, kube_watch.Listed):
                self._seen(warm_label(item.objects[0]) if item.objects else "")
            elif item.type == "DELETED":
                self._seen("")
            else:
                self._seen(warm_label(item.obj))
