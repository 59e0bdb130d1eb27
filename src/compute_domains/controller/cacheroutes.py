"""The indexes of the controller's informers (names and functions) and the routing of every
change in them to the CD keys it concerns: the change handlers of ``caches.Caches``
(``Routing`` is its base class).

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

The handler of ComputeDomain changes, ``Caches._cd_changed``, stays in ``caches``: its V2 line
keeps that module's logger name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import names, nodemark, sharedimex
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.controller import claims, informer, pending
from compute_domains.controller.status import node_is_ready

Enqueue = Callable[[str, float], None]
Assign = Callable[[str], None]
Replace = Callable[[str], None]
CD_INDEX = "cd"
WARM_INDEX = "warm"
UID_INDEX = "uid"
NODE_INDEX = "node"
CLAIM_INDEX = "claim"
CHANNEL_INDEX = "channel"


def channel_uids(obj: Any) -> Iterable[str]:
    """The CD UIDs of an object's channel annotations (a Node or a shared registry)."""
    return tuple(sharedimex.channels(obj.metadata.annotations))


def uid(obj: Any) -> Iterable[str]:
    """The index of ComputeDomains by their own UID (``UID_INDEX``)."""
    domain_uid = obj.metadata.uid
    return (domain_uid,) if domain_uid else ()


def pod_node(obj: Any) -> Iterable[str]:
    """The index of pods by the node they are bound to (``NODE_INDEX``)."""
    node = obj.spec.nodeName if obj.spec is not None else None
    return (node,) if node else ()


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


def _label(obj: Any) -> str | None:
    if obj is None:
        return None
    value = (obj.metadata.labels or {}).get(names.COMPUTE_DOMAIN_LABEL)
    return str(value) if value else None


def _mark(node: Any) -> str | None:
    """The CD a Node is marked for, label or annotation (``api.nodemark``), or None."""
    return (nodemark.domain_of(node.metadata) or None) if node is not None else None


class Routing:
    """The change handlers of ``caches.Caches``, its subclass, whose ``__init__`` sets the
    attributes declared here and subscribes the handlers to its informers; and the held-node
    replacer's sweep (``held_nodes``), which the replacer's routing here complements."""

    _enqueue: Enqueue
    _assign: Assign | None
    _replace: Replace | None
    _coalesce: float
    _summaries: claims.Summaries
    _decoded: informer.PerObject[ComputeDomainClique]
    cds: informer.Informer[Any]
    pods: informer.Informer[Pod]
    nodes: informer.Informer[Node]
    claims: informer.Informer[ResourceClaim]

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
