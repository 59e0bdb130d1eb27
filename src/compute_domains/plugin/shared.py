"""The per-clique scope's API side for one node: channel, Node annotation and label, readiness.

``SharedPort`` is what the claim state machine needs (``Shared`` here; unit tests pass a fake):

- ``following`` / ``allocate`` / ``wait_ready``: the clique's shared registry (``registry``);
  a prepare opens ``following`` as soon as it knows its CD is per clique, so the registry's
  and the agent pods' reads and watches run during its writes.
- ``attach(cd, n)``: one merge patch of our Node that sets the annotation
  ``compute-domains/channel.<X>=<n>`` and the label ``compute-domains/shared-imex=on`` (the
  resident agent then runs, or keeps running, the clique's shared IMEX). It carries the
  Node's ``resourceVersion``, like the per-domain CD label's patch (``computedomain``), so the
  two scopes can never both win a node: a Node with a CD label refuses the attach
  (``NodeHeldError``), and a Node with the shared label refuses the CD label. A conflict
  re-reads (bounded). No CD label is written for a per-clique CD. The first try plans from the
  Node as the plugin's Node watch last saw it (``node_seen``) when that one lacks the marks to
  write, so a formation's attach is one write, not a read and a write: a stale Node only costs
  a conflict (the patch carries its resourceVersion), and a Node that seems to have every mark
  already is read fresh before nothing is written (our own detach may not have reached the
  watch yet).
- ``detach(X)``: removes X's annotation (X's last live claim here went). The label stays: the
  shared IMEX is never stopped by a detach.
- ``join`` / ``leave``: the label alone (``eager``: at start with ``shared_imex_eager``, or to
  free an idle node at start without it).
- ``node_channels``: the Node's channel annotations (cleanup's stray-annotation step).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from compute_domains.api import names, nodemark, sharedimex
from compute_domains.api.computedomain import ComputeDomain
from compute_domains.infra import errors, kube
from compute_domains.infra.kube import cache
from compute_domains.plugin import computedomain, registry

logger = logging.getLogger(__name__)

NODE_ATTEMPTS = 5
"""Conflicting Node writes in a row one ``attach``/``join`` survives (then retryable)."""
Scope = sharedimex.Scope


class SharedPort(Protocol):
    """What the claim state machine needs of the per-clique scope's API."""

    def following(self, clique_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """While open, the clique's registry and the node's agent pods are followed, and
        ``allocate`` and ``wait_ready`` of that clique read them from there."""
        ...

    async def allocate(self, clique_id: str, cd: ComputeDomain) -> int:
        """CD ``cd``'s channel in the clique (temporary error when none can be had)."""
        ...

    async def wait_ready(self, cd: ComputeDomain, clique_id: str, timeout: float) -> None:
        """Return once the node's shared IMEX is Ready (temporary error on timeout)."""
        ...

    async def attach(self, cd: ComputeDomain, channel: int) -> None:
        """Annotate the Node with ``cd``'s channel and label it for the shared IMEX."""
        ...

    async def detach(self, domain_uid: str) -> None:
        """Remove the Node's channel annotation of ``domain_uid`` (the label stays)."""
        ...

    async def join(self) -> bool:
        """Label the Node for the shared IMEX; True when written now."""
        ...

    async def leave(self) -> bool:
        """Remove the Node's shared-IMEX label; True when removed now."""
        ...

    async def node_channels(self) -> dict[str, int]:
        """CD UID → channel, from the Node's annotations."""
        ...


class Shared:
    """The ``SharedPort`` in use: our Node's per-clique marks and the shared registries."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        node: str,
        driver_namespace: str,
        cliques: cache.Cache[Any] | None = None,
        pods: cache.Cache[Any] | None = None,
    ) -> None:
        """``cliques``, ``pods``: the host's clique and bound-pod caches (None: own watches)."""
        self._client = client
        self._node = node
        self._seen: Node | None = None
        """Our Node as the plugin's Node watch last saw it (``node_seen``)."""
        self._registry = registry.Registry(
            client, node=node, driver_namespace=driver_namespace, cliques=cliques, pods=pods
        )

    def node_seen(self, node: Any) -> None:
        """Our Node as the plugin's Node watch sees it now (None: gone)."""
        self._seen = node

    def following(self, clique_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """See ``registry.Registry.following``."""
        return self._registry.following(clique_id)

    async def hold(self, clique_id: str) -> None:
        """See ``registry.Registry.hold``."""
        await self._registry.hold(clique_id)

    async def allocate(self, clique_id: str, cd: ComputeDomain) -> int:
        """See ``registry.Registry.allocate``."""
        return await self._registry.allocate(clique_id, cd)

    async def wait_ready(self, cd: ComputeDomain, clique_id: str, timeout: float) -> None:
        """See ``registry.Registry.wait_ready``."""
        await self._registry.wait_ready(cd, clique_id, timeout)

    async def attach(self, cd: ComputeDomain, channel: int) -> None:
        """Annotate and label the Node for ``cd``'s ``channel`` (a no-op when both are there).

        Raises:
            computedomain.NodeHeldError: a per-domain CD's label is on the Node.
            errors.TemporaryError: the API failed, or the writes kept conflicting.
        """
        key = sharedimex.channel_key(cd.uid)
        wrote = await self._conditional(
            f"ComputeDomain {cd.namespace}/{cd.name}",
            {key: str(channel)},
        )
        if wrote:
            logger.info(
                "node serves ComputeDomain %s/%s on IMEX channel %d of its clique's shared IMEX",
                cd.namespace,
                cd.name,
                channel,
                extra={"node": self._node, "cd": f"{cd.namespace}/{cd.name}"},
            )

    async def join(self) -> bool:
        """Label the Node for the shared IMEX; True when written now.

        Raises:
            computedomain.NodeHeldError: a per-domain CD's label is on the Node.
            errors.TemporaryError: the API failed, or the writes kept conflicting.
        """
        return await self._conditional("the clique's shared IMEX", {})

    async def _conditional(self, who: str, annotations: Mapping[str, str]) -> bool:
        """Set the label (and ``annotations``) under the Node's resourceVersion, unless a CD
        label is there; whether anything was written."""
        # The watched Node may only lead to a write (its resourceVersion guards it); a
        # decision not to write (held, or nothing missing) is made on a fresh read.
        seen = self._seen
        conflicts = 0
        while conflicts < NODE_ATTEMPTS:
            node = seen if seen is not None else await self._get()
            meta = node.metadata
            labels = (meta.labels if meta else None) or {}
            current = (meta.annotations if meta else None) or {}
            held = nodemark.domain_of(meta)
            missing = {k: v for k, v in annotations.items() if current.get(k) != v}
            done = labels.get(sharedimex.SHARED_IMEX_LABEL) == sharedimex.SHARED_IMEX_ON
            if node is seen and (held or (done and not missing)):
                seen = None
                continue
            seen = None
            if held:
                raise computedomain.NodeHeldError(
                    f"node {self._node} is held by another ComputeDomain (label "
                    f"{names.COMPUTE_DOMAIN_LABEL}={held}, scope {Scope.PER_DOMAIN}); {who} "
                    f"(scope {Scope.PER_CLIQUE}) can use it once that one leaves"
                )
            if done and not missing:
                return False
            patch: dict[str, Any] = {
                "labels": {sharedimex.SHARED_IMEX_LABEL: sharedimex.SHARED_IMEX_ON},
                # The resourceVersion makes the patch conditional: a concurrent writer → 409.
                "resourceVersion": meta.resourceVersion if meta else None,
            }
            if missing:
                patch["annotations"] = missing
            try:
                await self._patch({"metadata": patch})
            except kube.Conflict:
                conflicts += 1
                continue
            return True
        raise errors.TemporaryError(
            f"labelling node {self._node} for {who}: {NODE_ATTEMPTS} writes in a row conflicted "
            "with other writers; retrying"
        )

    async def detach(self, domain_uid: str) -> None:
        """Remove the Node's channel annotation of ``domain_uid`` (nothing when absent)."""
        key = sharedimex.channel_key(domain_uid)
        node = await self._get()
        annotations = (node.metadata.annotations if node.metadata else None) or {}
        if key not in annotations:
            return
        # Only our own key is removed: no precondition needed, nobody else writes it.
        await self._unconditional({"metadata": {"annotations": {key: None}}})
        logger.info(
            "removed node annotation %s: no live claim of that ComputeDomain is left here",
            key,
            extra={"node": self._node},
        )

    async def leave(self) -> bool:
        """Remove the Node's shared-IMEX label; True when removed now."""
        node = await self._get()
        labels = (node.metadata.labels if node.metadata else None) or {}
        if sharedimex.SHARED_IMEX_LABEL not in labels:
            return False
        await self._unconditional({"metadata": {"labels": {sharedimex.SHARED_IMEX_LABEL: None}}})
        return True

    async def node_channels(self) -> dict[str, int]:
        """CD UID → channel, from the Node's annotations."""
        node = await self._get()
        return sharedimex.channels(node.metadata.annotations if node.metadata else None)

    async def _get(self) -> Node:
        try:
            with kube.translated(f"reading node {self._node}"):
                return await self._client.get(Node, self._node)
        except kube.KubeError as err:
            raise errors.TemporaryError(str(err)) from err

    async def _patch(self, patch: dict[str, Any]) -> None:
        """A merge patch of our Node; ``kube.Conflict`` passes through, other failures are
        temporary."""
        try:
            with kube.translated(f"updating node {self._node}"):
                await self._client.patch(Node, self._node, patch, patch_type=PatchType.MERGE)
        except kube.Conflict:
            raise
        except kube.KubeError as err:
            raise errors.TemporaryError(str(err)) from err

    async def _unconditional(self, patch: dict[str, Any]) -> None:
        try:
            await self._patch(patch)
        except kube.Conflict as err:  # no precondition: only a server-side race gets here
            raise errors.TemporaryError(str(err)) from err
