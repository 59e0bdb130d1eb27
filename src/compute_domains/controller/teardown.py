"""Tearing down what belongs to a ComputeDomain: on its deletion, and for orphans after crashes.

Order (upstream §7.2): workload ResourceClaimTemplate, daemon ResourceClaimTemplate,
DaemonSet, cliques, node labels (the ``computeDomain`` label and the warm-spare label), the
per-clique CD's channel annotations ``compute-domains/channel.<cdUID>`` (first on every Node, then
on every shared registry, so its number is released last and never handed to another CD while
a node still names it), then our finalizers. The shared registries themselves and the Nodes'
``compute-domains/shared-imex`` labels are never touched: they serve other CDs. Unlike
upstream, every step runs even if an earlier one failed (a missing DaemonSet never blocks
deleting the daemon template), and each object's own finalizer is removed right after its
deletion is requested. The CD's finalizer is removed only when every step succeeded and none
of the objects still holds our finalizer.

Only objects labelled with the CD's UID are touched (found by live, label-selected lists, not
the cache, so an object created a moment ago is not missed); a node label is removed only while
it still names this CD (JSON-patch ``test``), so a label another CD set meanwhile survives. A
node mark written as an annotation (``api.nodemark``) cannot be selected by a list: those nodes
come from the cache's CD index of the Nodes, and are removed under the same ``test``. A
channel annotation is removed by a JSON patch that tests the value of a fresh read and removes
that one key, so a concurrent write of any other annotation (another CD's channel) is never
lost. The Nodes and registries that hold it are found through the caches' channel indexes, not a
live list: in the per-clique scope every GPU Node carries the shared-IMEX label, and listing them
all at each deletion would cost more than the whole formation; normally the plugin has removed
a node's annotation with the CD's last claim already (the deletion waited for the claims), and
an annotation the cache had not seen yet names a CD that no longer exists, which the orphan
sweep finds in the same indexes and removes.

Orphans (objects naming a CD that no longer exists) get the same steps without the CD
finalizer, but only after a live list of ComputeDomains confirmed that no CD has that UID.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node
from lightkube.resources.resource_v1 import ResourceClaimTemplate
from lightkube.types import PatchType

from compute_domains.api import names, nodemark, sharedimex
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.controller import kubeapi, warm
from compute_domains.infra import errors

logger = logging.getLogger(__name__)


def _pointer(key: str) -> str:
    """A JSON-pointer token for a label or annotation key."""
    return key.replace("~", "~0").replace("/", "~1")


_LABEL_PATH = "/metadata/labels/" + _pointer(names.COMPUTE_DOMAIN_LABEL)
_ANNOTATION_PATH = "/metadata/annotations/" + _pointer(nodemark.KEY)
_ATTEMPTS = 3
"""Removals of one channel annotation whose test failed (its value moved) before giving up."""


class Teardown:
    """Deletes the objects of one CD UID; every method is idempotent."""

    def __init__(
        self,
        api: kubeapi.Api,
        *,
        namespace: str,
        channel_nodes: Callable[[str], Iterable[str]] = lambda _uid: (),
        channel_registries: Callable[[str], Iterable[str]] = lambda _uid: (),
        annotated_nodes: Callable[[str], Iterable[str]] = lambda _uid: (),
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._channel_nodes = channel_nodes
        """Names of the cached Nodes annotated with a CD's channel."""
        self._channel_registries = channel_registries
        """Names of the cached shared registries holding a CD's channel."""
        self._annotated_nodes = annotated_nodes
        """Names of the cached Nodes whose CD mark is an annotation naming a CD."""

    async def run(self, domain_uid: str, *, channels: bool = True) -> None:
        """Every teardown step for ``domain_uid``; raises the first failure after trying all.
        ``channels``: also the per-clique steps (False for a CD admitted per domain, which
        never had a channel).

        Raises:
            errors.TemporaryError: a step failed or an object still holds our finalizer.
        """
        failures: list[errors.ComputeDomainsError] = []
        steps = (
            self.workload_templates,
            self._daemon_templates,
            self._daemonsets,
            self._cliques,
            self._node_labels,
            *((self._node_channels, self._registry_channels) if channels else ()),
        )
        for step in steps:
            try:
                await step(domain_uid)
            except errors.ComputeDomainsError as err:
                logger.warning("teardown of %s: %s", domain_uid, err)
                failures.append(err)
        if failures:
            raise errors.TemporaryError(
                f"teardown of CD {domain_uid} incomplete: {failures[0]}"
            ) from (failures[0])
        await self._assert_released(domain_uid)

    async def finalize(self, cd: Any, *, shared: bool = True) -> bool:
        """Tear down a CD being deleted and release it; True once its finalizer is gone.
        ``shared``: it was served in the per-clique scope (or may have been)."""
        domain_uid = cd.metadata.uid
        await self.run(domain_uid, channels=shared)
        meta = cd.metadata
        await self._api.remove_finalizer(
            ComputeDomainResource, meta.name, names.FINALIZER, namespace=meta.namespace
        )
        return True

    async def cd_exists(self, domain_uid: str) -> bool:
        """Whether the API server (not the cache) knows a ComputeDomain with this UID."""
        cds: list[Any] = await self._api.list(
            ComputeDomainResource, namespace=kubeapi.ALL_NAMESPACES
        )
        return any(cd.metadata.uid == domain_uid for cd in cds)

    async def orphan(self, domain_uid: str) -> bool:
        """Tear down ``domain_uid``'s objects if no CD has that UID; True if it was an orphan."""
        if await self.cd_exists(domain_uid):
            return False
        logger.info("cleaning up objects of deleted ComputeDomain %s", domain_uid)
        await self.run(domain_uid)
        return True

    # ---- steps ---------------------------------------------------------------------------

    def _selector(self, domain_uid: str, target: str | None = None) -> dict[str, str]:
        labels = {names.COMPUTE_DOMAIN_LABEL: domain_uid}
        if target is not None:
            labels[names.TARGET_LABEL] = target
        return labels

    async def _delete_and_release(self, res: Any, objects: list[Any]) -> None:
        for obj in objects:
            meta = obj.metadata
            if meta.deletionTimestamp is None:
                await self._api.delete(res, meta.name, namespace=meta.namespace)
            await self._api.remove_finalizer(
                res, meta.name, names.FINALIZER, namespace=meta.namespace
            )

    async def workload_templates(self, domain_uid: str) -> None:
        """Delete (and release) the workload templates of ``domain_uid``: no new workload claims."""
        found = await self._api.list(
            ResourceClaimTemplate,
            namespace=kubeapi.ALL_NAMESPACES,
            labels=self._selector(domain_uid, names.TARGET_WORKLOAD),
        )
        await self._delete_and_release(ResourceClaimTemplate, found)

    async def _daemon_templates(self, domain_uid: str) -> None:
        found = await self._api.list(
            ResourceClaimTemplate,
            namespace=self._namespace,
            labels=self._selector(domain_uid, names.TARGET_DAEMON),
        )
        await self._delete_and_release(ResourceClaimTemplate, found)

    async def _daemonsets(self, domain_uid: str) -> None:
        found = await self._api.list(
            DaemonSet, namespace=self._namespace, labels=self._selector(domain_uid)
        )
        await self._delete_and_release(DaemonSet, found)

    async def _cliques(self, domain_uid: str) -> None:
        found: list[Any] = await self._api.list(
            ComputeDomainCliqueResource,
            namespace=self._namespace,
            labels=self._selector(domain_uid),
        )
        for clique in found:
            await self._api.delete(
                ComputeDomainCliqueResource, clique.metadata.name, namespace=self._namespace
            )

    async def _node_labels(self, domain_uid: str) -> None:
        for node in await self._api.list(Node, labels=self._selector(domain_uid)):
            await self.remove_node_label(node.metadata.name or "", domain_uid)  # type: ignore[union-attr]
        for name in sorted(set(self._annotated_nodes(domain_uid))):
            await self.remove_node_label(name, domain_uid, path=_ANNOTATION_PATH)
        for node in await self._api.list(Node, labels={names.WARM_FOR_LABEL: domain_uid}):
            await warm.remove_label(self._api, node.metadata.name or "", domain_uid)  # type: ignore[union-attr]

    async def remove_node_label(
        self, node: str, domain_uid: str, *, path: str = _LABEL_PATH
    ) -> None:
        """Remove the CD mark at ``path`` (the label, or the annotation) from ``node`` if (and
        only if) it still names ``domain_uid``."""
        patch = [
            {"op": "test", "path": path, "value": domain_uid},
            {"op": "remove", "path": path},
        ]
        try:
            await self._api.patch(Node, node, patch, patch_type=PatchType.JSON)
        except (kubeapi.NotFound, errors.PermanentError) as err:
            # Gone, or the label changed since the list (the test failed): nothing of ours left.
            logger.debug("node %s: label of %s not removed: %s", node, domain_uid, err)
            return
        logger.info(
            "removed label of ComputeDomain %s from node %s", domain_uid, node, extra={"node": node}
        )

    async def _node_channels(self, domain_uid: str) -> None:
        key = sharedimex.channel_key(domain_uid)
        for name in sorted(set(self._channel_nodes(domain_uid))):
            await self._remove_annotation(Node, name, None, key)

    async def _registry_channels(self, domain_uid: str) -> None:
        key = sharedimex.channel_key(domain_uid)
        for name in sorted(set(self._channel_registries(domain_uid))):
            if sharedimex.is_registry_name(name):
                await self._remove_annotation(
                    ComputeDomainCliqueResource, name, self._namespace, key
                )

    async def _remove_annotation(
        self, res: Any, name: str, namespace: str | None, key: str
    ) -> None:
        """Remove annotation ``key`` from the object, testing the value of a fresh read, again
        after another read when the test fails (the value moved)."""
        path = "/metadata/annotations/" + _pointer(key)
        for _ in range(_ATTEMPTS):
            obj: Any = await self._api.get(res, name, namespace=namespace)
            value = (obj.metadata.annotations or {}).get(key) if obj is not None else None
            if value is None:
                return
            patch = [{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}]
            try:
                await self._api.patch(
                    res, name, patch, namespace=namespace, patch_type=PatchType.JSON
                )
            except kubeapi.NotFound:
                return
            except kubeapi.Invalid:  # the value moved since the read: read again
                continue
            logger.info("removed %s from %s %s", key, res.__name__, name)
            return
        raise errors.TemporaryError(f"{res.__name__} {name}: {key} kept changing")

    async def _assert_released(self, domain_uid: str) -> None:
        leftovers: list[str] = []
        for res, namespace in (
            (ResourceClaimTemplate, kubeapi.ALL_NAMESPACES),
            (DaemonSet, self._namespace),
        ):
            for obj in await self._api.list(
                res, namespace=namespace, labels=self._selector(domain_uid)
            ):
                if names.FINALIZER in (obj.metadata.finalizers or []):  # type: ignore[attr-defined]
                    leftovers.append(f"{res.__name__} {obj.metadata.namespace}/{obj.metadata.name}")  # type: ignore[attr-defined]
        if leftovers:
            raise errors.TemporaryError(f"still holding finalizers of CD {domain_uid}: {leftovers}")
