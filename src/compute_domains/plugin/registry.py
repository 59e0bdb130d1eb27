"""The clique's shared registry as the plugin uses it: a CD's channel, and the node's readiness.

The shared registry of clique ``C`` is the ComputeDomainClique ``shared-imex.<C>`` in the driver
namespace (``api.sharedimex``). The plugin does two things with it:

- **Follow** the registry and the node's agent pods for the span of one prepare
  (``following``, ``agentready.Following``): opened as soon as the prepare knows the CD's
  scope, so the first read and the watches run while the prepare writes; prepares of the same
  clique at once share one. Inside it, ``allocate`` plans from the followed registry (no read
  of its own) and ``wait_ready`` waits on the followers (no read or watch of its own). A node
  that serves its clique's shared IMEX from its start (eager) holds its clique's follower for
  the plugin's life (``hold``: a read and two narrow watches per node, replaced when its API
  fails), so even the first prepare pays neither the read nor the watches' start (measured at
  N = 36 per clique: the allocation step fell from about 1 s under load to 0).
- **Allocate** CD ``X``'s channel in the clique (``allocate``): read the registry (the
  followed state when a ``following`` is open; every re-read after a conflict is fresh), plan with
  ``sharedimex.allocate`` (``X``'s existing number, else the lowest free one), and write a new
  number as the annotation ``compute-domains/channel.<X>`` by a merge patch that carries the
  read's ``resourceVersion``, so the API server refuses it (409) if anyone wrote the registry
  in between: another node's plugin taking a number, or the agent writing its entry. A conflict
  re-reads and re-plans, so two CDs never get one number, a CD racing from several nodes ends
  with the one number the first writer took, and no writer's annotation is lost. A missing
  registry is created with the CD's annotation and the labels ``compute-domains/imex-scope=
  perClique`` and the clique ID (never the CD label: no CD's teardown may touch it); the agent
  may create it at the same moment, so ``AlreadyExists`` re-reads too. After
  ``ALLOCATE_ATTEMPTS`` conflicts in a row, or with every number taken, the claim fails with a
  retryable error. The number is released by the controller's teardown of the CD, never here.
- **Wait** until this node's entry in the registry (the resident agent writes it) is Ready
  and the node's agent pod is Ready with the entry's IP (``wait_ready``, ``agentready``: an
  agent killed with ``kill -9`` leaves its entry Ready, and its shared IMEX is gone with it);
  each is read once, then followed by a watch (or the host's shared caches), from the
  prepare's ``following`` when one is open, else for this wait alone; a timeout says
  why: the controller's ``CliqueFull`` naming this node when it says so (the registry has
  every slot taken), else that the node's shared IMEX is not Ready yet, or its agent not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from lightkube import AsyncClient
from lightkube.generic_resource import GenericNamespacedResource
from lightkube.types import PatchType

from compute_domains.api import names, sharedimex
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomain
from compute_domains.infra import errors, kube
from compute_domains.infra.kube import cache
from compute_domains.plugin import agentready, computedomain

logger = logging.getLogger(__name__)

ALLOCATE_ATTEMPTS = 12
"""Conflicting writes in a row one ``allocate`` survives before it gives up (retryable)."""


class Registry:
    """Channel allocation in, and readiness from, the shared registries (one node's view)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        node: str,
        driver_namespace: str,
        cliques: cache.Cache[Any] | None = None,
        pods: cache.Cache[Any] | None = None,
    ) -> None:
        self._client = client
        self._node = node
        self._ns = driver_namespace
        self._ready = agentready.AgentReady(
            client, node=node, driver_namespace=driver_namespace, cliques=cliques, pods=pods
        )
        """The readiness wait; with the host's clique and bound-pod caches (``cliques``,
        ``pods``), no watch of its own."""
        self._open: dict[str, agentready.Following] = {}
        """Registry name → its follower while a prepare holds it open (``following``)."""
        # Only asked why a wait timed out (a full clique): its own reads are rare enough.
        self._domains = computedomain.Domains(client, node=node, driver_namespace=driver_namespace)

    @contextlib.asynccontextmanager
    async def following(self, clique_id: str) -> AsyncIterator[None]:
        """Follow clique ``clique_id``'s registry and this node's agent pods while open
        (shared with every other prepare that holds the same clique's open)."""
        name = sharedimex.registry_name(clique_id)
        found = self._open.get(name)
        if found is None or found.ended:
            # A follower that failed answers only its failure: a new one replaces it for
            # whoever comes next (its holders still see it, and drop it when they leave).
            found = self._ready.following(name)
            found.start()
            self._open[name] = found
        found.users += 1
        try:
            yield
        finally:
            found.users -= 1
            if found.users == 0:
                if self._open.get(name) is found:
                    del self._open[name]
                await found.stop()

    async def hold(self, clique_id: str, *, retry_s: float = 1.0) -> None:
        """Keep clique ``clique_id``'s follower open until cancelled: on a node that serves
        its clique's shared IMEX from the start (eager), the first prepare then plans and
        waits from state already followed instead of paying the first read and the watches'
        start. A follower that ends (its API failed) is replaced after ``retry_s``."""
        name = sharedimex.registry_name(clique_id)
        while True:
            async with self.following(clique_id):
                await self._open[name].wait_ended()
            logger.warning(
                "following registry %s/%s ended; following it again in %gs",
                self._ns,
                name,
                retry_s,
                extra={"node": self._node},
            )
            await asyncio.sleep(retry_s)

    async def allocate(self, clique_id: str, cd: ComputeDomain) -> int:
        """CD ``cd``'s channel in clique ``clique_id``'s registry (allocated now if it has none).

        Raises:
            errors.TemporaryError: every channel is taken, the writes kept conflicting, or the
                API failed.
        """
        name = sharedimex.registry_name(clique_id)
        where = f"registry {self._ns}/{name}"
        followed = self._open.get(name)
        for attempt in range(ALLOCATE_ATTEMPTS):
            # The first plan may use the followed state: a stale one only costs a conflict
            # (the write carries its resourceVersion) or names X's own, kept number.
            found = (
                await self._followed(followed, name)
                if followed is not None and attempt == 0
                else await self._read(name)
            )
            meta = found.metadata if found is not None else None
            annotations = (meta.annotations if meta is not None else None) or {}
            try:
                channel, new = sharedimex.allocate(annotations, cd.uid)
            except sharedimex.ChannelsExhaustedError as err:
                raise errors.TemporaryError(
                    f"no IMEX channel free for ComputeDomain {cd.namespace}/{cd.name} in {where}: "
                    f"{err}; one frees when a per-clique ComputeDomain of the clique is deleted"
                ) from err
            if not new:
                return channel
            try:
                if found is None:
                    await self._create(name, clique_id, cd.uid, channel)
                else:
                    version = meta.resourceVersion if meta is not None else None
                    await self._write(name, cd.uid, channel, version)
            except (kube.Conflict, kube.AlreadyExists):
                continue  # someone wrote the registry since our read: re-read and re-plan
            except kube.KubeError as err:
                raise errors.TemporaryError(str(err)) from err
            logger.info(
                "allocated IMEX channel %d to ComputeDomain %s/%s in %s",
                channel,
                cd.namespace,
                cd.name,
                where,
                extra={"node": self._node, "cd": f"{cd.namespace}/{cd.name}"},
            )
            return channel
        raise errors.TemporaryError(
            f"allocating an IMEX channel for ComputeDomain {cd.namespace}/{cd.name} in {where}: "
            f"{ALLOCATE_ATTEMPTS} writes in a row conflicted with other writers; retrying"
        )

    async def _followed(
        self, followed: agentready.Following, name: str
    ) -> GenericNamespacedResource | None:
        try:
            with kube.translated(f"reading registry {self._ns}/{name}"):
                found: GenericNamespacedResource | None = await followed.registry_now()
        except kube.KubeError as err:
            raise errors.TemporaryError(str(err)) from err
        return found

    async def _read(self, name: str) -> GenericNamespacedResource | None:
        try:
            with kube.translated(f"reading registry {self._ns}/{name}"):
                return await self._client.get(ComputeDomainCliqueResource, name, namespace=self._ns)
        except kube.NotFound:
            return None
        except kube.KubeError as err:
            raise errors.TemporaryError(str(err)) from err

    async def _create(self, name: str, clique_id: str, domain_uid: str, channel: int) -> None:
        body: dict[str, Any] = {
            "apiVersion": names.API_VERSION,
            "kind": names.CLIQUE_KIND,
            "metadata": {
                "name": name,
                "namespace": self._ns,
                "labels": sharedimex.registry_labels(clique_id),
                "annotations": {sharedimex.channel_key(domain_uid): str(channel)},
            },
        }
        with kube.translated(f"creating registry {self._ns}/{name}"):
            await self._client.create(ComputeDomainCliqueResource(**body))

    async def _write(self, name: str, domain_uid: str, channel: int, version: str | None) -> None:
        # The resourceVersion makes the merge patch conditional: a writer since our read → 409.
        patch = {
            "metadata": {
                "annotations": {sharedimex.channel_key(domain_uid): str(channel)},
                "resourceVersion": version,
            }
        }
        with kube.translated(f"writing the channel of {domain_uid} in registry {self._ns}/{name}"):
            await self._client.patch(
                ComputeDomainCliqueResource,
                name,
                patch,
                namespace=self._ns,
                patch_type=PatchType.MERGE,
            )

    async def wait_ready(self, cd: ComputeDomain, clique_id: str, timeout: float) -> None:
        """Return once this node's entry in clique ``clique_id``'s registry is Ready and the
        node's agent pod is Ready with the entry's IP.

        Raises:
            errors.TemporaryError: not Ready within ``timeout`` seconds, or the API failed.
        """
        name = sharedimex.registry_name(clique_id)
        where = f"registry {self._ns}/{name}"
        seen = agentready.Waited()
        try:
            async with self.following(clique_id), asyncio.timeout(timeout):
                followed = self._open[name]
                seen = followed.seen
                await followed.until_ready(self._node)
        except TimeoutError as err:
            # A full registry keeps the node out for good: say so, as a per-domain wait does
            # (the kubelet shows this as the pod's event; upstream's 18-per-clique limit).
            blocked = await self._domains.blocked(cd)
            agent = seen.agent_why(self._node)
            why = blocked or (
                f"waiting for {where}: the node's shared IMEX is not Ready: {agent}"
                if agent
                else f"waiting for {where}: the node's shared IMEX is not Ready yet"
            )
            raise errors.TemporaryError(
                f"current node not ready in ComputeDomain {cd.namespace}/{cd.name} after "
                f"{timeout:g}s ({why})"
            ) from err
        except kube.KubeError as err:
            raise errors.TemporaryError(str(err)) from err
