"""Kubernetes Events on the daemon's own pod (clique full, restarts) and, for what the CD's owner
must see (IMEX session in use), on its ComputeDomain.

``post()`` is synchronous and never blocks (a supervisor hook or a sync path calls it); the
``run()`` task hands each Event to ``infra.kube.events.Recorder``, which aggregates a repeat of
the same (type, reason, message) into the Event already created (``count``/``lastTimestamp``),
remembers only the ``remember`` most recent distinct messages (so a daemon that runs for months
does not keep every message it ever sent), and logs and drops a failed write: reporting must
never stop the daemon from doing its work.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from lightkube import AsyncClient
from lightkube.models.core_v1 import ObjectReference

from compute_domains.api import names
from compute_domains.daemon.config import Identity
from compute_domains.infra.kube import events as kube_events

logger = logging.getLogger(__name__)

COMPONENT: Final = "compute-domain-daemon"
"""``source.component`` and ``reportingComponent`` of our Events."""
NORMAL: Final = kube_events.NORMAL
WARNING: Final = kube_events.WARNING

CLIQUE_FULL: Final = "CliqueFull"
"""Our node cannot join: every slot of the clique is taken."""
IMEX_RESTARTED: Final = "ImexRestarted"
"""nvidia-imex exited unexpectedly and is restarted after a backoff."""
IMEX_SESSION_IN_USE: Final = "ImexSessionInUse"
"""nvidia-imex cannot start: another nvidia-imex (a host service) holds the node's session."""

_QUEUE_LIMIT = 64


class PodEvents:
    """Events about one pod (ours); see the module docstring."""

    def __init__(self, client: AsyncClient, ident: Identity, *, remember: int = 64) -> None:
        self._ident = ident
        self._queue: asyncio.Queue[tuple[bool, str, str, str]] = asyncio.Queue(_QUEUE_LIMIT)
        self._recorder = kube_events.Recorder(
            client,
            component=COMPONENT,
            instance=ident.node_name,
            host=ident.node_name,
            remember=remember,
        )

    def post(self, kind: str, reason: str, message: str, *, on_domain: bool = False) -> None:
        """Queue one Event on our pod, or with ``on_domain`` on our ComputeDomain (dropped
        with a warning when the queue is full; ``on_domain`` without a known CD name: on the
        pod instead)."""
        on_domain = on_domain and bool(self._ident.domain_name and self._ident.domain_namespace)
        try:
            self._queue.put_nowait((on_domain, kind, reason, message))
        except asyncio.QueueFull:
            logger.warning("event queue full; dropping %s %s: %s", kind, reason, message)

    async def run(self) -> None:
        """Create queued Events until cancelled (the recorder never raises)."""
        ident = self._ident
        pod = ObjectReference(
            apiVersion="v1",
            kind="Pod",
            name=ident.pod_name,
            namespace=ident.pod_namespace,
            uid=ident.pod_uid,
        )
        domain = ObjectReference(
            apiVersion=names.API_VERSION,
            kind=names.COMPUTE_DOMAIN_KIND,
            name=ident.domain_name,
            namespace=ident.domain_namespace,
            uid=ident.domain_uid or None,
        )
        while True:
            on_domain, kind, reason, message = await self._queue.get()
            await self._recorder.emit(domain if on_domain else pod, kind, reason, message)
