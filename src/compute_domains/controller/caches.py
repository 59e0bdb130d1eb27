"""The controller's informers, their indexes, and the routing of every change to a CD key.

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

Routing: every change is turned into the UID of the CD it concerns and enqueued. CD, DaemonSet
and template changes are enqueued at once (but a CD event of the resourceVersion already cached,
the watch's echo of the controller's own write, starts no pass: it would find nothing new); pod,
clique, claim and node-health changes after the short coalescing delay, so a burst of them
becomes one status write per CD. A Node matters only when its readiness or its CD label changed,
or it was deleted; a change of a Node's labels (or a Node added or deleted) also goes, at once,
to every CD with the warm-nodes annotation and to the CDs its warm label named. A change of a
Node's channel annotations goes to the CDs added or removed, and a change of its readiness (or
its deletion) to every CD it serves by channel; a change of a shared registry goes to the CDs
holding a channel in it and to those the changed entries' nodes serve (an IMEX crash there makes
each of them NotReady). Daemon pod and clique changes also go to the index assigner
(``assigner``), which keeps its own queue. A workload claim's change goes, by node name, to the
held-node replacer (``replacer``) for the nodes it was and is allocated on, and so does a Node
whose CD, warm or shared-IMEX label changed. No watch is opened per CD: the per-clique scope
adds indexes to two caches only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from lightkube import operators
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate

from compute_domains.api import names, nodemark, sharedimex
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.controller import agentpods, claims, config, informer, kubeapi, pending
from compute_domains.controller.status import node_is_ready
from compute_domains.infra import logs

logger = logging.getLogger(__name__)

Enqueue = Callable[[str, float], None]
Assign = Callable[[str], None]
Replace = Callable[[str], None]
CD_INDEX = "cd"
WARM_INDEX = "warm"
UID_INDEX = "uid"
NODE_INDEX = "node"
CLAIM_INDEX = "claim"
CHANNEL_INDEX = "channel"


def _channel_uids(obj: Any) -> Iterable[str]:
    """The CD UIDs of an object's channel annotations (a Node or a shared registry)."""
    return tuple(sharedimex.channels(obj.metadata.annotations))


def _channels(obj: Any) -> dict[str, int]:
    if obj is None or obj.metadata is None:
        return {}
    return sharedimex.channels(obj.metadata.annotations)


def _entries(registry: Any) -> dict[str, Any]:
    """A raw registry's ``daemons`` entries by node name."""
    if registry is None:
        return {}
    raw = registry.get("daemons") if hasattr(registry, "get") else None
    return {str(d.get("nodeName")): d for d in raw or [] if isinstance(d, dict)}


def _uid(obj: Any) -> Iterable[str]:
    domain_uid = obj.metadata.uid
    return (domain_uid,) if domain_uid else ()


def _pod_node(obj: Any) -> Iterable[str]:
    node = obj.spec.nodeName if obj.spec is not None else None
    return (node,) if node else ()


def _same_version(old: Any, new: Any) -> bool:
    """Whether two versions of an object carry the same (set) resourceVersion: the same
    stored object, e.g. the watch's echo of a write the controller already cached."""
    version = old.metadata.resourceVersion
    return bool(version) and version == new.metadata.resourceVersion


def _label(obj: Any) -> str | None:
    if obj is None:
        return None
    value = (obj.metadata.labels or {}).get(names.COMPUTE_DOMAIN_LABEL)
    return str(value) if value else None


def _mark(node: Any) -> str | None:
    """The CD a Node is marked for, label or annotation (``api.nodemark``), or None."""
    return (nodemark.domain_of(node.metadata) or None) if node is not None else None


class Caches:
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
            indexers={UID_INDEX: _uid},
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
            indexers={**by_cd, NODE_INDEX: _pod_node},
            on_change=self._membership,
            **common,
        )
        self.cliques: informer.Informer[Any] = informer.Informer(
            api,
            ComputeDomainCliqueResource,
            name="cliques",
            namespace=settings.namespace,
            indexers={**by_cd, CHANNEL_INDEX: _channel_uids},
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
                CHANNEL_INDEX: _channel_uids,
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

    # ---- routing -------------------------------------------------------------------------

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

    def _now(self, old: Any, new: Any) -> None:
        for domain_uid in {_label(old), _label(new)} - {None}:
            self._enqueue(str(domain_uid), 0.0)

    def _template_changed(self, old: Any, new: Any) -> None:
        self._now(old, new)
        if new is None and old is not None:
            # A name was freed: a CD whose template name conflicted with it can take it now.
            ns, name = old.metadata.namespace, old.metadata.name
            for cd in self.cds.objects():
                spec = cd.get("spec") or {}
                wanted = ((spec.get("channel") or {}).get("resourceClaimTemplate") or {}).get(
                    "name"
                )
                if cd.metadata.namespace == ns and wanted == name and cd.metadata.uid:
                    self._enqueue(cd.metadata.uid, 0.0)

    def _later(self, old: Any, new: Any) -> None:
        for domain_uid in {_label(old), _label(new)} - {None}:
            self._enqueue(str(domain_uid), self._coalesce)

    def _membership(self, old: Any, new: Any) -> None:
        """A daemon pod or a clique changed: the status, and the index assigner, look again."""
        self._later(old, new)
        if self._assign is not None:
            for domain_uid in {_label(old), _label(new)} - {None}:
                self._assign(str(domain_uid))

    def _claim_changed(self, old: Any, new: Any) -> None:
        if new is None and old is not None:
            self._summaries.forget(old)
        domain_uids = set(claims.domain_uids(old) if old is not None else ())
        domain_uids |= set(claims.domain_uids(new) if new is not None else ())
        if old is not None and new is not None:
            summary = claims.WorkloadClaim.from_claim
            if summary(old) == summary(new):
                return  # e.g. only the plugin's device status changed
        for domain_uid in domain_uids:
            self._enqueue(domain_uid, self._coalesce)
        if self._replace is not None and domain_uids:
            for claim in (old, new):
                if claim is not None and (node := claims.allocated_node(claim)):
                    self._replace(node)

    def held_nodes(self) -> list[str]:
        """Names of the cached nodes with a CD, warm or shared-IMEX label (the replacer's
        sweep)."""
        held = {names.COMPUTE_DOMAIN_LABEL, names.WARM_FOR_LABEL, sharedimex.SHARED_IMEX_LABEL}
        return sorted(
            str(n.metadata.name)
            for n in self.nodes.objects()
            if n.metadata is not None and held & set(nodemark.effective_labels(n.metadata))
        )

    def _unscheduled_changed(self, old: Any, new: Any) -> None:
        """A pod waiting for the scheduler changed (its message, or it was placed): the CDs
        whose claims it names look again."""
        keys = set(pending.claim_keys(old) if old is not None else ())
        keys |= set(pending.claim_keys(new) if new is not None else ())
        for key in keys:
            ns, _, name = key.partition("/")
            claim = self.claims.get(ns, name)
            for domain_uid in claims.domain_uids(claim) if claim is not None else ():
                self._enqueue(domain_uid, self._coalesce)

    def _clique_changed(self, old: Any, new: Any) -> None:
        obj = new if new is not None else old
        if new is None:
            self._decoded.forget(obj.metadata.name or "")
        if sharedimex.is_registry_name(obj.metadata.name or ""):
            self._registry_changed(old, new)  # no CD label: not any CD's own clique
        else:
            self._membership(old, new)

    def _registry_changed(self, old: Any, new: Any) -> None:
        """A shared registry changed: the CDs holding a channel in it, and those served by the
        nodes whose entries changed (a channel may be on a node before the registry shows it)."""
        uids = set(_channels(old)) | set(_channels(new))
        before, after = _entries(old), _entries(new)
        for node in {n for n in before.keys() | after.keys() if before.get(n) != after.get(n)}:
            uids |= set(_channels(self.nodes.get("", node)))
        for domain_uid in uids:
            self._enqueue(domain_uid, self._coalesce)

    def _channel_routing(self, old: Node | None, new: Node | None) -> None:
        """The per-clique CDs a Node serves: those whose channel came or went, and all of them
        when its readiness changed or it came or went."""
        before, after = _channels(old), _channels(new)
        if old is None or new is None or node_is_ready(old) != node_is_ready(new):
            uids = before.keys() | after.keys()
        else:
            uids = {u for u in before.keys() | after.keys() if before.get(u) != after.get(u)}
        for domain_uid in uids:
            self._enqueue(domain_uid, self._coalesce)

    def _node_changed(self, old: Node | None, new: Node | None) -> None:
        self._warm_routing(old, new)
        self._channel_routing(old, new)
        held = (names.COMPUTE_DOMAIN_LABEL, names.WARM_FOR_LABEL, sharedimex.SHARED_IMEX_LABEL)
        before = nodemark.effective_labels(old.metadata) if old is not None else {}
        after = nodemark.effective_labels(new.metadata) if new is not None else {}
        if self._replace is not None and new is not None and new.metadata is not None:
            if any(before.get(k) != after.get(k) for k in held):
                self._replace(str(new.metadata.name))
        shared_changed = before.get(sharedimex.SHARED_IMEX_LABEL) != after.get(
            sharedimex.SHARED_IMEX_LABEL
        )
        labels = {_mark(old), _mark(new)} - {None}
        if old is not None and new is not None and _mark(old) == _mark(new) and not shared_changed:
            if node_is_ready(old) == node_is_ready(new):
                return
            labels = set()  # label unchanged: only the daemons on the node care
        name = (new or old).metadata.name  # type: ignore[union-attr]
        for pod in self.pods.by_index(NODE_INDEX, name or ""):
            labels.add(_label(pod))
        if _mark(old) != _mark(new) or shared_changed:  # the CDs waiting there name the holder
            for claim in self.claims.by_index(NODE_INDEX, name or ""):
                labels.update(claims.domain_uids(claim))
        for domain_uid in labels - {None}:
            self._enqueue(str(domain_uid), self._coalesce)

    def _warm_routing(self, old: Node | None, new: Node | None) -> None:
        """A node's labels (or CD mark) changed, or it came or went: the CDs whose warm nodes it
        may be."""
        before = nodemark.effective_labels(old.metadata) if old is not None else {}
        after = nodemark.effective_labels(new.metadata) if new is not None else {}
        if old is not None and new is not None and before == after:
            return
        uids = {before.get(names.WARM_FOR_LABEL), after.get(names.WARM_FOR_LABEL)} - {None, ""}
        for cd in self.cds.objects():
            if names.WARM_NODES_ANNOTATION in (cd.metadata.annotations or {}) and cd.metadata.uid:
                uids.add(cd.metadata.uid)
        for domain_uid in uids:
            self._enqueue(str(domain_uid), 0.0)
