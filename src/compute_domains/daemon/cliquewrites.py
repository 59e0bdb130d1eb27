"""The daemon's only writes to its clique: its own entry's readiness, its removal, and its
lost-peers annotation.

Both are JSON patches built by ``cliqueentry`` (``status_patch``, ``removal_patch``): ``test``
operations on our entry's node name and IP at its position, then the change. They carry no
resourceVersion, so the other daemons' writes and the controller's never make them conflict.
A failed test (422: our entry moved, or a replacement pod took it over) or a vanished clique
(404) is counted in ``compute_domains_daemon_clique_conflicts_total{verb="patch"}`` and
answered with a fresh read, which the caller plans from again. The daemon never creates the
clique or adds its entry: the controller does (``controller/assigner.py``). The annotation
(``cliqueentry.lost_peers_note``) is a JSON merge patch of that one key: no resourceVersion
either, and no other writer ever writes that key.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.types import PatchType

from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.daemon import kubeio, metrics
from compute_domains.daemon.config import Identity
from compute_domains.infra import errors

logger = logging.getLogger(__name__)


class EntryMoved(errors.TemporaryError):
    """Our entry was not where the patch expected it (or the clique is gone); re-read."""


class CliqueWrites:
    """Reads and guarded patches of our clique (one per daemon)."""

    def __init__(self, client: AsyncClient, ident: Identity, meter: metrics.DaemonMetrics) -> None:
        self._client = client
        self._ident = ident
        self._meter = meter

    async def read(self) -> Any | None:
        """The clique as stored now (None when it does not exist).

        Raises:
            errors.ComputeDomainsError: the read failed.
        """
        name = self._ident.clique_name
        try:
            return await self._client.get(
                ComputeDomainCliqueResource, name, namespace=self._ident.pod_namespace
            )
        except (httpx.HTTPError, OSError) as err:
            if kubeio.status_code(err) == 404:
                return None
            raise kubeio.classify(err, f"read clique {name}") from err

    async def patch(self, ops: list[dict[str, Any]], what: str) -> ComputeDomainClique:
        """Apply ``ops`` (guarded by their tests); the clique as written.

        Raises:
            EntryMoved: a test failed or the clique is gone (re-read and plan again).
            errors.ComputeDomainsError: any other failure, classified.
        """
        name = self._ident.clique_name
        try:
            raw = await self._client.patch(
                ComputeDomainCliqueResource,
                name,
                ops,
                namespace=self._ident.pod_namespace,
                patch_type=PatchType.JSON,
            )
        except (httpx.HTTPError, OSError) as err:
            code = kubeio.status_code(err)
            if code in (404, 409, 422):
                self._meter.clique_conflict(metrics.PATCH)
                raise EntryMoved(f"{what} in clique {name}: our entry moved ({code})") from err
            raise kubeio.classify(err, f"{what} in clique {name}") from err
        return ComputeDomainClique.from_resource(raw)

    async def annotate(self, key: str, value: str | None) -> ComputeDomainClique:
        """Set (None: remove) our annotation ``key``; the clique as written.

        Raises:
            EntryMoved: the clique is gone.
            errors.ComputeDomainsError: any other failure, classified.
        """
        name = self._ident.clique_name
        body = {"metadata": {"annotations": {key: value}}}
        try:
            raw = await self._client.patch(
                ComputeDomainCliqueResource,
                name,
                body,
                namespace=self._ident.pod_namespace,
                patch_type=PatchType.MERGE,
            )
        except (httpx.HTTPError, OSError) as err:
            if kubeio.status_code(err) == 404:
                raise EntryMoved(f"annotate clique {name}: it is gone") from err
            raise kubeio.classify(err, f"annotate clique {name}") from err
        return ComputeDomainClique.from_resource(raw)
