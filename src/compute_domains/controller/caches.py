"""The controller's informers, their indexes, and the lookups over them; the routing of every
change to a CD key is ``cacheroutes``'s (the base class of ``Caches``).

Watched (spec §5, narrowed to what we use):
- ComputeDomains, all namespaces; indexed by UID;
- DaemonSets and daemon pods in the driver namespace, label ``resource.nvidia.com/computeDomain``
  present; pods also indexed by node;
- ResourceClaimTemplates, all namespaces, with that label (both targets);
- ComputeDomainCliques in the driver namespace;
- Nodes, all (a daemon's node may already have lost its label); indexed by that label, by
  the warm-spare label ``compute-domains/warm-for`` (``warm``) and by the CD UIDs of their
  channel annotations ``compute-domains/channel.<cdUID>`` (the per-clique CDs they serve);
- the shared registries ``shared-imex.<cliqueID>`` among the cliques (no CD label), indexed by
  the CD UIDs of their channel annotations, read by name for a node's clique;
- ResourceClaims, all namespaces, indexed by the CD UID of their channel config
  (``claims.domain_uids``): the workload claims that make a node part of a CD's status, and
  that a CD's deletion waits for; and by the node they are allocated on (``node``);
- unscheduled Pods (``spec.nodeName`` empty), all namespaces, indexed by the claims they name
  (``pending.claim_keys``): the pods of a job that wait for the scheduler (``pending``);
- the resident agents' pods in the driver namespace (``agentpods``, its own routing): a
  per-clique entry counts as Ready only while its node's agent pod is Ready.

Routing (``cacheroutes``): every change is turned into the UID of the CD it concerns and
enqueued; ``_cd_changed`` (a ComputeDomain's) is here, so its V2 line keeps this module's
logger name.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lightkube import operators
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate

from compute_domains.api import names, nodemark, sharedimex
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.controller import (
    agentpods,
    cacheroutes,
    claims,
    config,
    informer,
    kubeapi,
    pending,
)
from compute_domains.infra import logs

logger = logging.getLogger(__name__)

Enqueue = cacheroutes.Enqueue
Assign = cacheroutes.Assign
Replace = cacheroutes.Replace
CD_INDEX = cacheroutes.CD_INDEX
WARM_INDEX = cacheroutes.WARM_INDEX
UID_INDEX = cacheroutes.UID_INDEX
NODE_INDEX = cacheroutes.NODE_INDEX
CLAIM_INDEX = cacheroutes.CLAIM_INDEX
CHANNEL_INDEX = cacheroutes.CHANNEL_INDEX


def _same_version(old: Any, new: Any) -> bool:
    """Whether two versions of an object carry the same (set) resourceVersion: the same
    stored object, e.g. the watch's echo of a write the controller already cached."""
    version = old.metadata.resourceVersion
    return bool(version) and version == new.metadata.resourceVersion


class Caches(cacheroutes.Routing):
    """Every informer of one leadership term."""

    def __init__(
        self,
        api: kubeapi.Api,
        settings: config.ControllerSettings,
        enqueue: Enqueue,
        assign: Assign | None = None,
        replace: Replace | None = None,
    ) -> None:
        self._enqueue = enqueue
        self._assign = assign
        self._replace = replace
        self._coalesce = settings.status_coalesce_s
        self._namespace = settings.namespace
        has_cd = {names.COMPUTE_DOMAIN_LABEL: operators.exists()}
        by_cd = {CD_INDEX: informer.label_indexer(names.COMPUTE_DOMAIN_LABEL)}
        common: dict[str, Any] = {"watch_timeout_s": settings.watch_timeout_s}
        self.cds: informer.Informer[Any] = informer.Informer(
            api,
            ComputeDomainResource,
            name="computedomains",
            indexers={UID_INDEX: cacheroutes.uid},
            on_change=self._cd_changed,
            **common,
        )
        self.daemonsets: informer.Informer[DaemonSet] = informer.Informer(
            api,
            DaemonSet,
            name="daemonsets",
            namespace=settings.namespace,
            labels=has_cd,
            indexers=by_cd,
            on_change=self._now,
            **common,
        )
        self.templates: informer.Informer[ResourceClaimTemplate] = informer.Informer(
            api,
            ResourceClaimTemplate,
            name="resourceclaimtemplates",
            labels=has_cd,
            indexers=by_cd,
            on_change=self._template_changed,
            **common,
        )
        self.pods: informer.Informer[Pod] = informer.Informer(
            api,
            Pod,
            name="pods",
            namespace=settings.namespace,
            labels=has_cd,
            indexers={**by_cd, NODE_INDEX: cacheroutes.pod_node},
            on_change=self._membership,
            **common,
        )
        self.cliques: informer.Informer[Any] = informer.Informer(
            api,
            ComputeDomainCliqueResource,
            name="cliques",
            namespace=settings.namespace,
            indexers={**by_cd, CHANNEL_INDEX: cacheroutes.channel_uids},
            on_change=self._clique_changed,
            **common,
        )
        self.nodes: informer.Informer[Node] = informer.Informer(
            api,
            Node,
            name="nodes",
            namespace=None,
            indexers={
                CD_INDEX: nodemark.index,
                WARM_INDEX: informer.label_indexer(names.WARM_FOR_LABEL),
                CHANNEL_INDEX: cacheroutes.channel_uids,
            },
            on_change=self._node_changed,
            **common,
        )

        self.claims: informer.Informer[ResourceClaim] = informer.Informer(
            api,
            ResourceClaim,
            name="resourceclaims",
            indexers={
                CD_INDEX: claims.domain_uids,
                NODE_INDEX: informer.field_indexer(claims.allocated_node),
            },
            on_change=self._claim_changed,
            **common,
        )
        self.unscheduled: informer.Informer[Pod] = informer.Informer(
            api,
            Pod,
            name="unscheduled-pods",
            fields={"spec.nodeName": ""},
            indexers={CLAIM_INDEX: pending.claim_keys},
            on_change=self._unscheduled_changed,
            **common,
        )
        self.agents = agentpods.AgentPods(api, settings, enqueue, lambda n: self.nodes.get("", n))
        self._summaries = claims.Summaries()
        self._decoded: informer.PerObject[ComputeDomainClique] = informer.PerObject(
            ComputeDomainClique.from_resource
        )

    def clique_of(self, raw: Any) -> ComputeDomainClique:
        """A cached clique decoded once per cached version, for the assigner and the status
        pass alike (``DecodeError`` each time for a malformed one)."""
        return self._decoded.of(raw.metadata.name or "", raw)

    @property
    def all(self) -> tuple[informer.Informer[Any], ...]:
        """Every informer."""
        return (
            self.cds,
            self.daemonsets,
            self.templates,
            self.pods,
            self.cliques,
            self.nodes,
            self.claims,
            self.unscheduled,
            self.agents.informer,
        )

    async def wait_synced(self) -> None:
        """Until every informer has stored its first list."""
        await asyncio.gather(*(i.synced.wait() for i in self.all))

    # ---- lookups -------------------------------------------------------------------------

    def cd(self, domain_uid: str) -> Any | None:
        """The cached ComputeDomain with this UID."""
        found = self.cds.by_index(UID_INDEX, domain_uid)
        return found[0] if found else None

    def templates_of(self, domain_uid: str, target: str) -> list[ResourceClaimTemplate]:
        """Cached templates of CD ``domain_uid`` with target label ``target``."""
        return [
            t
            for t in self.templates.by_index(CD_INDEX, domain_uid)
            if (t.metadata.labels or {}).get(names.TARGET_LABEL) == target  # type: ignore[union-attr]
        ]

    def workload_of(self, domain_uid: str) -> list[claims.WorkloadClaim]:
        """The cached workload claims of CD ``domain_uid``."""
        found = self.claims.by_index(CD_INDEX, domain_uid)
        return [self._summaries.of(c) for c in found]

    def pending_of(self, domain_uid: str) -> list[pending.PendingPod]:
        """The unscheduled pods that hold an unallocated workload claim of CD ``domain_uid``."""
        found: set[pending.PendingPod] = set()
        for claim in self.workload_of(domain_uid):
            if claim.placed:
                continue
            key = f"{claim.namespace}/{claim.name}"
            pods = list(self.unscheduled.by_index(CLAIM_INDEX, key))
            owner = self.unscheduled.get(claim.namespace, claim.owner) if claim.owner else None
            if owner is not None:
                pods.append(owner)
            for pod in pods:
                waiting = pending.waiting(pod, claim.name)
                if waiting is not None:
                    found.add(waiting)
        return sorted(found)

    def holders_besides(self, domain_uid: str) -> list[str]:
        """Every other CD that holds nodes, with its nodes (``pending.holders``)."""
        held = {
            uid: [n.metadata.name or "" for n in self.nodes.by_index(CD_INDEX, uid) if n.metadata]
            for uid in self.nodes.index_values(CD_INDEX)
        }

        def name_of(uid: str) -> str | None:
            cd = self.cd(uid)
            return f"{cd.metadata.namespace}/{cd.metadata.name}" if cd is not None else None

        return pending.holders(held, domain_uid, name_of)

    def referenced_domain_uids(self) -> set[str]:
        """CD UIDs named by any cached object other than a CD (candidates for orphans)."""
        found: set[str] = set()
        for inf in (self.daemonsets, self.templates, self.cliques, self.nodes):
            found |= inf.index_values(CD_INDEX)
        found |= self.nodes.index_values(CHANNEL_INDEX) | self.cliques.index_values(CHANNEL_INDEX)
        return found | self.nodes.index_values(WARM_INDEX)

    def has_leftovers(self, domain_uid: str) -> bool:
        """Whether any object the controller cleans up still names CD ``domain_uid``."""
        return (
            bool(self.nodes.by_index(WARM_INDEX, domain_uid))
            or any(
                inf.by_index(CD_INDEX, domain_uid)
                for inf in (self.daemonsets, self.templates, self.cliques, self.nodes)
            )
            or any(inf.by_index(CHANNEL_INDEX, domain_uid) for inf in (self.nodes, self.cliques))
        )

    def channel_nodes_of(self, domain_uid: str) -> list[Node]:
        """The cached Nodes annotated ``compute-domains/channel.<domain_uid>``."""
        return self.nodes.by_index(CHANNEL_INDEX, domain_uid)

    def registries_of(self, domain_uid: str) -> list[Any]:
        """The cached shared registries that hold a channel of CD ``domain_uid``."""
        return [
            r
            for r in self.cliques.by_index(CHANNEL_INDEX, domain_uid)
            if sharedimex.is_registry_name(r.metadata.name or "")
        ]

    def registry(self, clique_id: str) -> Any | None:
        """The cached shared registry of clique ``clique_id`` (None when there is none)."""
        if not clique_id:
            return None
        return self.cliques.get(self._namespace, sharedimex.registry_name(clique_id))

    def warm_nodes_of(self, domain_uid: str) -> list[Node]:
        """The cached nodes that carry CD ``domain_uid``'s warm label."""
        return self.nodes.by_index(WARM_INDEX, domain_uid)

    def status_counts(self) -> list[str | None]:
        """``status.status`` of every cached CD (None where never written)."""
        out: list[str | None] = []
        for cd in self.cds.objects():
            status = cd.get("status") or {}
            out.append(status.get("status") if isinstance(status, dict) else None)
        return out

    # ---- routing (the rest is ``cacheroutes.Routing``'s) ----------------------------------

    def _cd_changed(self, old: Any, new: Any) -> None:
        obj = new if new is not None else old
        domain_uid = obj.metadata.uid
        if new is not None:  # NVIDIA's words for this moment (at its verbosity 2)
            meta = new.metadata
            logger.log(
                logs.V2,
                "Processing added or updated ComputeDomain: %s/%s/%s",
                meta.namespace,
                meta.name,
                domain_uid,
            )
        if old is not None and new is not None and _same_version(old, new):
            return  # the echo of our own write, already cached by ``observe``: nothing new
        if domain_uid:
            self._enqueue(domain_uid, 0.0)
