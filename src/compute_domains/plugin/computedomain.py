"""Node-side ComputeDomain checks: find a CD by UID, own the node label, wait for readiness.

- Lookups read a watched cache of the ComputeDomains indexed by UID, as upstream's plugin does
  (``domainwatch``: the host's one cache on a virtual node, the plugin's own in its own process).
  A fresh read (a list in the claim's namespace, filtered by UID) is made only when the cache
  does not hold the CD (created a moment ago, not yet seen by the watch) or has not listed yet,
  so a CD that exists is always found; one deleted a moment ago may still be found, as it may
  be between a fresh read and its use. So a prepare costs no API round trip for its CD (at
  N = 36 per clique under load 15, that list took 0.01 to 2.1 s of each prepare), and no
  prepare lists every ComputeDomain of a host of hundreds of nodes. Without any cache (unit
  tests, tools) every lookup is a fresh read. A channel claim whose CD does not exist, or lives
  in another namespace than the claim, fails permanently; a daemon claim (which lives in the
  driver namespace) finds its CD in any namespace and retries while it is missing, as upstream.
- The node's mark ``resource.nvidia.com/computeDomain=<cdUID>`` (``api.nodemark``: a label, which
  pulls the CD's daemon onto the node; or, with resident agents and ``NODE_MARK=annotation``, an
  annotation, on which kube-scheduler re-queues nothing) says which CD the node serves. It is
  written with a resourceVersion precondition, so two writers cannot both win; a label for
  another CD, or the per-clique scope's ``compute-domains/shared-imex=on`` (written under the
  same precondition by ``shared``), refuses the claim with a retryable error. Removing it only
  ever removes our own value (a newer CD's mark is left alone), in both forms.
- Readiness is watched, not polled (``domainwatch.follow``), until the node's entry is Ready or
  the attempt's time runs out. On a node with a clique ID the entry is in the ComputeDomainClique
  ``<cdUID>.<cliqueID>`` (driver namespace), written by the daemon; on a node without one it is
  the CD's ``status.nodes`` entry, which the controller derives from the daemon pod.
- A wait that times out says why when the controller knows: if the CD's ``Ready`` condition is
  ``CliqueFull`` naming this node, the error (which the kubelet shows as the pod's event) names
  the full clique and its limit instead of "IMEX daemon not Ready yet" (``blocked``; the
  per-clique scope's wait, ``registry``, asks the same).

``domainwatch``'s public names are re-exported here, where their callers have always found them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from lightkube import ALL_NS, AsyncClient
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from compute_domains.api import conditions, names, nodemark, sharedimex
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomain, ComputeDomainResource, Readiness
from compute_domains.infra import errors, kube
from compute_domains.infra.kube import cache, informers
from compute_domains.plugin.domainwatch import UID_INDEX as UID_INDEX
from compute_domains.plugin.domainwatch import cached_name as cached_name
from compute_domains.plugin.domainwatch import cliques as cliques
from compute_domains.plugin.domainwatch import follow as follow
from compute_domains.plugin.domainwatch import host_cache as host_cache
from compute_domains.plugin.domainwatch import own_cache as own_cache
from compute_domains.plugin.domainwatch import states as states

logger = logging.getLogger(__name__)


class NodeHeldError(errors.TemporaryError):
    """The node is labelled for another ComputeDomain."""


class DomainPort(Protocol):
    """What the claim state machine needs from the API (``Domains``; unit tests pass a fake)."""

    async def find(self, domain_uid: str, namespace: str = ALL_NS) -> ComputeDomain | None:
        """The CD with ``domain_uid`` in ``namespace``, or None."""
        ...

    async def for_channel(self, domain_uid: str, claim_namespace: str) -> ComputeDomain:
        """The CD of a workload claim (permanent error when missing or elsewhere)."""
        ...

    async def for_daemon(self, domain_uid: str) -> ComputeDomain:
        """The CD of a daemon claim (temporary error when missing)."""
        ...

    async def label(self, cd: ComputeDomain) -> bool:
        """Mark the node for ``cd`` (``NodeHeldError`` when marked for another)."""
        ...

    async def unlabel(self, domain_uid: str) -> bool:
        """Remove the node's mark if it names ``domain_uid``."""
        ...

    async def label_value(self) -> str:
        """The CD UID the node is marked for ("" when none)."""
        ...

    async def wait_ready(self, cd: ComputeDomain, clique_id: str, timeout: float) -> None:
        """Return once the node's daemon of ``cd`` is Ready (temporary error on timeout)."""
        ...


class Domains:
    """ComputeDomain reads and node-label writes for one node (the ``DomainPort`` in use)."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        node: str,
        driver_namespace: str,
        shared: informers.Informers | None = None,
        watched: cache.Cache[Any] | None = None,
        mark: nodemark.Form = nodemark.Form.LABEL,
    ) -> None:
        """``shared``: the host's caches (a virtual node); else ``watched``: the plugin's own
        ComputeDomain cache (``own_cache``, run by its owner); neither: fresh reads only.
        ``mark``: the form the node's mark is written in."""
        self._client = client
        self._mark = mark
        self._node = node
        self._driver_ns = driver_namespace
        self._domains = watched if shared is None else host_cache(shared)
        self.cliques = None if shared is None else cliques(shared, driver_namespace)
        """The host's clique cache of the driver namespace (None: watch on our own)."""

    async def find(self, domain_uid: str, namespace: str = ALL_NS) -> ComputeDomain | None:
        """The CD with ``domain_uid`` in ``namespace`` (all namespaces by default), or None;
        without its ``status.nodes``, which no caller here reads.

        The list is read undecoded and only the CD asked for is decoded, less its node
        entries: every prepare looks its CD up, and decoding a 1,152-entry status (and every
        other CD of the list) for each of 2,304 prepares was most of a loaded node's CPU.
        """
        if self._domains is not None and self._domains.synced.is_set():
            cached = self._domains.by_index(UID_INDEX, domain_uid)
            for obj in cached:
                if namespace in (ALL_NS, (obj.get("metadata") or {}).get("namespace")):
                    return _without_nodes(dict(obj))
            if cached:
                return None  # a UID names one object: it is in another namespace
        # The plugin's policy: any failure to read is temporary (the kubelet retries the claim).
        try:
            with kube.translated("listing ComputeDomains"):
                items = await kube.list_raw(
                    self._client, ComputeDomainResource, namespace=namespace
                )
        except kube.KubeError as err:
            raise errors.TemporaryError(str(err)) from err
        for item in items:
            if (item.get("metadata") or {}).get("uid") == domain_uid:
                return _without_nodes(item)
        return None

    async def for_channel(self, domain_uid: str, claim_namespace: str) -> ComputeDomain:
        """The CD of a workload claim, which must live in the claim's namespace.

        Raises:
            errors.PermanentError: no such CD, or it lives in another namespace.
        """
        cd = await self.find(domain_uid, claim_namespace)
        if cd is not None:
            return cd
        elsewhere = await self.find(domain_uid)
        if elsewhere is not None:
            raise errors.PermanentError(
                f"ComputeDomain {elsewhere.namespace}/{elsewhere.name} ({domain_uid}) is in "
                f"another namespace than the claim ({claim_namespace})"
            )
        raise errors.PermanentError(f"ComputeDomain with UID {domain_uid} not found")

    async def for_daemon(self, domain_uid: str) -> ComputeDomain:
        """The CD of a daemon claim (any namespace).

        Raises:
            errors.TemporaryError: not found (yet).
        """
        cd = await self.find(domain_uid)
        if cd is None:
            raise errors.TemporaryError(f"compute domain not found: {domain_uid}")
        return cd

    async def label(self, cd: ComputeDomain) -> bool:
        """Mark the node for ``cd``; True when the mark was written now.

        Raises:
            NodeHeldError: the node is marked for another ComputeDomain.
            errors.TemporaryError: the API refused or conflicted.
        """
        node = await self._get_node()
        current = nodemark.domain_of(node.metadata)
        if current == cd.uid:
            return False
        labels = (node.metadata.labels if node.metadata else None) or {}
        if current:
            form = "label" if labels.get(nodemark.KEY) else "annotation"
            raise NodeHeldError(
                f"node {self._node} is held by another ComputeDomain ({form} "
                f"{names.COMPUTE_DOMAIN_LABEL}={current}); ComputeDomain "
                f"{cd.namespace}/{cd.name} can use it once that one leaves"
            )
        if labels.get(sharedimex.SHARED_IMEX_LABEL) == sharedimex.SHARED_IMEX_ON:
            # The API's word, for a plugin whose Node watch has not seen the label yet.
            raise NodeHeldError(
                f"node {self._node} is held by the {sharedimex.Scope.PER_CLIQUE} scope (it runs "
                f"its clique's shared IMEX: node label {sharedimex.SHARED_IMEX_LABEL}="
                f"{sharedimex.SHARED_IMEX_ON}); ComputeDomain {cd.namespace}/{cd.name} (scope "
                f"{sharedimex.Scope.PER_DOMAIN}) can use it once the node leaves that scope "
                f"(label {sharedimex.SHARED_IMEX_LABEL} removed)"
            )
        await self._patch_mark(node, cd.uid)
        logger.info(
            "labelled node for ComputeDomain"
            if self._mark is nodemark.Form.LABEL
            else "marked node for ComputeDomain (annotation)",
            extra={"node": self._node, "cd": f"{cd.namespace}/{cd.name}"},
        )
        return True

    async def unlabel(self, domain_uid: str) -> bool:
        """Remove the node's mark (either form) if it names ``domain_uid``; True when it was
        removed now."""
        node = await self._get_node()
        if nodemark.domain_of(node.metadata) != domain_uid:
            return False
        await self._patch_mark(node, None)
        logger.info(
            "removed node label of ComputeDomain %s", domain_uid, extra={"node": self._node}
        )
        return True

    async def label_value(self) -> str:
        """The CD UID the node is marked for, in either form ("" when none)."""
        node = await self._get_node()
        return nodemark.domain_of(node.metadata)

    async def _get_node(self) -> Node:
        try:
            with kube.translated(f"reading node {self._node}"):
                return await self._client.get(Node, self._node)
        except kube.KubeError as err:
            raise errors.TemporaryError(str(err)) from err

    async def _patch_mark(self, node: Node, value: str | None) -> None:
        version = node.metadata.resourceVersion if node.metadata else None
        # The resourceVersion makes the patch conditional: a concurrent writer gets a 409.
        patch = nodemark.write_patch(self._mark, value, version)
        try:
            with kube.translated(f"updating node {self._node} {self._mark}"):
                await self._client.patch(Node, self._node, patch, patch_type=PatchType.MERGE)
        except kube.KubeError as err:
            raise errors.TemporaryError(str(err)) from err

    async def wait_ready(self, cd: ComputeDomain, clique_id: str, timeout: float) -> None:
        """Return once this node's entry for ``cd`` is Ready.

        Raises:
            errors.TemporaryError: not Ready within ``timeout`` seconds.
        """
        node = self._node
        if clique_id:
            name = names.clique_object_name(cd.uid, clique_id)
            where = f"clique {self._driver_ns}/{name}"

            def clique_ready(obj: Any) -> bool:
                entry = ComputeDomainClique.from_resource(obj).daemon(node)
                return entry is not None and entry.status is Readiness.READY

            waiting = follow(
                self._client,
                ComputeDomainCliqueResource,
                name,
                self._driver_ns,
                clique_ready,
                self.cliques,
            )
        else:
            where = f"status of ComputeDomain {cd.namespace}/{cd.name}"

            def cd_ready(obj: Any) -> bool:
                status = ComputeDomain.from_resource(obj).status
                entry = status.node(node) if status is not None else None
                return entry is not None and entry.status is Readiness.READY

            waiting = follow(
                self._client, ComputeDomainResource, cd.name, cd.namespace, cd_ready, self._domains
            )
        try:
            async with asyncio.timeout(timeout):
                with kube.translated(f"watching {where}"):
                    await waiting
        except TimeoutError as err:
            blocked = await self.blocked(cd)
            why = blocked or f"waiting for {where}: IMEX daemon not Ready yet"
            raise errors.TemporaryError(
                f"current node not ready in ComputeDomain {cd.namespace}/{cd.name} after "
                f"{timeout:g}s ({why})"
            ) from err
        except kube.KubeError as err:
            raise errors.TemporaryError(str(err)) from err

    async def blocked(self, cd: ComputeDomain) -> str:
        """What the controller says keeps this node out of ``cd`` ("" when nothing specific):
        its ``CliqueFull`` text naming this node (either scope: in the per-clique one the
        node's clique registry has every slot taken, ``registry``)."""
        try:
            fresh = await self.find(cd.uid, cd.namespace)
        except errors.TemporaryError:
            return ""
        ready = fresh.status.condition(conditions.READY) if fresh and fresh.status else None
        if ready is None or ready.reason != conditions.CLIQUE_FULL:
            return ""
        mine = f"node {self._node} "
        return next((p for p in ready.message.split("; ") if p.startswith(mine)), "")


def _without_nodes(item: dict[str, Any]) -> ComputeDomain:
    """The CD decoded without its ``status.nodes`` (no caller here reads them, and decoding a
    1,152-entry status for each of 2,304 prepares was most of a loaded node's CPU)."""
    status = item.get("status")
    if isinstance(status, dict):
        item = item | {"status": {k: v for k, v in status.items() if k != "nodes"}}
    return ComputeDomain.from_dict(item)
