"""The agent's reads and writes of its clique's shared registry (``shared-imex.<cliqueID>``).

Every write carries a precondition, so it never overwrites what another writer changed since
our read: a missing registry is created (the name is the precondition: 409 AlreadyExists when
someone made it first), an existing one is replaced with the resourceVersion it was read at
(409 Conflict when it changed since, 404 when it was deleted). Each refusal raises
:class:`Stale` and is counted in ``compute_domains_daemon_clique_conflicts_total{verb}``: the
caller re-reads and plans again. The body written is the planned object less its
``managedFields`` (the server keeps those itself).
"""

from __future__ import annotations

import logging
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient

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
        self, current: ComputeDomainClique | None, wanted: ComputeDomainClique
    ) -> ComputeDomainClique:
        """Create ``wanted`` (``current`` None) or replace ``current`` with it; as written.

        Raises:
            Stale: someone else wrote the registry since ``current`` was read.
            errors.ComputeDomainsError: any other failure, classified.
        """
        body = wanted.to_dict()
        body["metadata"] = {k: v for k, v in body["metadata"].items() if k != "managedFields"}
        obj = ComputeDomainCliqueResource(**body)
        verb = metrics.CREATE if current is None else metrics.UPDATE
        try:
            if current is None:
                raw = await self._client.create(obj)
            else:
                raw = await self._client.replace(obj)
        except (httpx.HTTPError, OSError) as err:
            code = kubeio.status_code(err)
            if code == 409 or (code == 404 and current is not None):
                self._meter.clique_conflict(verb)
                raise Stale(f"{verb} registry {self.name}: changed since read ({code})") from err
            raise kubeio.classify(err, f"{verb} registry {self.name}") from err
        written = decode(raw)
        if written is None:  # never: the answer to a write is the object written
            raise errors.TemporaryError(f"{verb} registry {self.name}: empty answer")
        return written
