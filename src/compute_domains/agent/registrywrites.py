"""The agent's reads and writes of its clique's shared registry (``shared-imex.<cliqueID>``).

No write overwrites what another writer changed since our read, and none fails because another
agent wrote its own entry meanwhile (issue 28): a missing registry is created (the name is the
precondition: 409 AlreadyExists when someone made it first); an existing one gets our entry's
change as a guarded JSON patch and the changed labels and annotations as a JSON merge patch of
those keys (``registrypatch``; no resourceVersion); only the first entry of a registry made
without one is a replace with the resourceVersion read (409 Conflict when it changed since).
A failed test (422), a vanished registry (404) or a conflict (409) raises :class:`Stale` and is
counted in ``compute_domains_daemon_clique_conflicts_total{verb}``: the caller re-reads and
plans again. A created or replaced body is the planned object less its ``managedFields`` (the
server keeps those itself).
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.types import PatchType

from compute_domains.agent import registrypatch
from compute_domains.api import sharedimex
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import DecodeError
from compute_domains.daemon import kubeio, metrics
from compute_domains.infra import errors

logger = logging.getLogger(__name__)


class Stale(errors.TemporaryError):
    """The registry changed (or appeared, or vanished) since it was read: re-read, re-plan."""


def decode(raw: Any | None) -> ComputeDomainClique | None:
    """The registry from an API answer (None: absent).

    Raises:
        errors.PermanentError: it cannot be decoded (someone wrote it wrong).
    """
    if raw is None:
        return None
    try:
        return ComputeDomainClique.from_resource(raw)
    except DecodeError as err:
        raise errors.PermanentError(f"the shared registry cannot be read: {err}") from err


class RegistryWrites:
    """Reads and preconditioned writes of one clique's registry.

    Args:
        client: API client (the agent's).
        clique_id: whose registry.
        namespace: the driver namespace.
        meter: where refused writes are counted.
    """

    def __init__(
        self, client: AsyncClient, *, clique_id: str, namespace: str, meter: metrics.DaemonMetrics
    ) -> None:
        self._client = client
        self.name = sharedimex.registry_name(clique_id)
        """The registry's name."""
        self._namespace = namespace
        self._meter = meter

    async def read(self) -> ComputeDomainClique | None:
        """The registry as stored now (None when it does not exist).

        Raises:
            errors.ComputeDomainsError: the read failed (classified).
        """
        try:
            raw = await self._client.get(
                ComputeDomainCliqueResource, self.name, namespace=self._namespace
            )
        except (httpx.HTTPError, OSError) as err:
            if kubeio.status_code(err) == 404:
                return None
            raise kubeio.classify(err, f"read registry {self.name}") from err
        return decode(raw)

    async def write(
        self, current: ComputeDomainClique | None, wanted: ComputeDomainClique, node: str
    ) -> ComputeDomainClique:
        """Make the registry ``current`` (None: absent) as ``wanted``, which changes only
        ``node``'s entry, labels and annotations (``registry.plan``); the registry as written.

        Raises:
            Stale: the registry changed under a test, or appeared or vanished, since read.
            errors.ComputeDomainsError: any other failure, classified.
        """
        if current is None:
            call = self._client.create(self._body(wanted))
            return await self._send(metrics.CREATE, call, stale={409})
        if not current.daemons and wanted.daemons:
            call = self._client.replace(self._body(wanted))
            return await self._send(metrics.UPDATE, call, stale={404, 409})
        written = current
        ops = registrypatch.entry_ops(current, wanted, node)
        if ops:
            written = await self._patch(ops, PatchType.JSON, stale={404, 409, 422})
        meta = registrypatch.meta_patch(current, wanted)
        if meta:
            written = await self._patch(meta, PatchType.MERGE, stale={404})
        return written

    @staticmethod
    def _body(wanted: ComputeDomainClique) -> Any:
        body = wanted.to_dict()
        body["metadata"] = {k: v for k, v in body["metadata"].items() if k != "managedFields"}
        return ComputeDomainCliqueResource(**body)

    async def _patch(self, patch: Any, kind: PatchType, stale: set[int]) -> ComputeDomainClique:
        return await self._send(
            metrics.PATCH,
            self._client.patch(
                ComputeDomainCliqueResource,
                self.name,
                patch,
                namespace=self._namespace,
                patch_type=kind,
            ),
            stale=stale,
        )

    async def _send(
        self, verb: str, call: Coroutine[Any, Any, Any], stale: set[int]
    ) -> ComputeDomainClique:
        """Await ``call``; an answer in ``stale`` means the registry moved since read."""
        try:
            raw = await call
        except (httpx.HTTPError, OSError) as err:
            code = kubeio.status_code(err)
            if code in stale:
                self._meter.clique_conflict(verb)
                raise Stale(f"{verb} registry {self.name}: changed since read ({code})") from err
            raise kubeio.classify(err, f"{verb} registry {self.name}") from err
        written = decode(raw)
        if written is None:  # never: the answer to a write is the object written
            raise errors.TemporaryError(f"{verb} registry {self.name}: empty answer")
        return written
