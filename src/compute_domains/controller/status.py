"""Pure derivation of a ComputeDomain's status from cliques, daemon pods and node health.

Rules (ours; upstream's §8.2 plus the truthfulness it lacks):
- Fabric entries come from the CD's cliques (``daemons[]``, in clique-name then index order);
  their ``(cliqueID, index)`` is copied, never reassigned here, so it stays stable while the
  daemon lives and never swaps between nodes.
- An entry is listed only while a daemon pod of this CD exists on its node; an entry whose pod
  is gone is left out and pruned from its clique (``stale_clique_nodes``).
- An entry is Ready only when its clique entry says Ready AND that daemon pod is Ready AND the
  Node is Ready; a NotReady or deleted Node makes it NotReady.
- Non-fabric nodes (pod label ``cliqueID`` present and empty) get an entry built from the pod:
  cliqueID "", index -1, Ready when the pod and the Node are.
- Node names are unique (the list-map key); the first entry of a node wins.
- ``status.status`` is upstream's §8.1 rule (``ComputeDomainStatus.computed``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import ComputeDomainNode, ComputeDomainStatus, Readiness


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DaemonPod:
    """What the status needs to know about one daemon pod."""

    name: str
    node_name: str
    """``spec.nodeName``; empty while unscheduled."""
    ip: str
    """``status.podIP``; empty until the pod has one."""
    ready: bool
    """Phase Running and condition Ready True."""
    clique_id: str | None
    """The pod's ``cliqueID`` label: None until the daemon set it, "" on non-fabric nodes."""

    @classmethod
    def from_pod(cls, pod: Any) -> DaemonPod:
        """Summarise a lightkube Pod."""
        meta, spec, status = pod.metadata, pod.spec, pod.status
        conditions = (status.conditions or []) if status is not None else []
        ready = (
            status is not None
            and status.phase == "Running"
            and any(c.type == "Ready" and c.status == "True" for c in conditions)
        )
        return cls(
            name=meta.name or "",
            node_name=(spec.nodeName or "") if spec is not None else "",
            ip=(status.podIP or "") if status is not None else "",
            ready=ready,
            clique_id=(meta.labels or {}).get(names.CLIQUE_ID_LABEL),
        )


def node_is_ready(node: Any) -> bool:
    """Whether a lightkube Node's ``Ready`` condition is True."""
    conditions = (node.status.conditions or []) if node.status is not None else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _ready(flag: bool) -> Readiness:
    return Readiness.READY if flag else Readiness.NOT_READY


def derive(
    *,
    num_nodes: int,
    cliques: Iterable[ComputeDomainClique],
    pods: Iterable[DaemonPod],
    node_ready: Mapping[str, bool],
) -> ComputeDomainStatus:
    """The status of one CD; ``node_ready`` maps node name to readiness (absent = deleted)."""
    by_node: dict[str, list[DaemonPod]] = {}
    for pod in pods:
        if pod.node_name:
            by_node.setdefault(pod.node_name, []).append(pod)
    entries: dict[str, ComputeDomainNode] = {}
    for clique in sorted(cliques, key=lambda c: c.name):
        for daemon in sorted(clique.daemons, key=lambda d: d.index):
            candidates = by_node.get(daemon.node_name)
            if not candidates or daemon.node_name in entries:
                continue
            pod = next((p for p in candidates if p.ip == daemon.ip_address), candidates[0])
            ready = (
                daemon.status is Readiness.READY
                and pod.ready
                and node_ready.get(daemon.node_name, False)
            )
            entries[daemon.node_name] = dataclasses.replace(daemon.to_node(), status=_ready(ready))
    for node_name in sorted(by_node):
        if node_name in entries:
            continue
        plain = next((p for p in by_node[node_name] if p.clique_id == "" and p.ip), None)
        if plain is None:
            continue
        ready = plain.ready and node_ready.get(node_name, False)
        entries[node_name] = ComputeDomainNode(
            name=node_name,
            ip_address=plain.ip,
            clique_id="",
            index=names.NON_FABRIC_INDEX,
            status=_ready(ready),
        )
    return ComputeDomainStatus.computed(entries.values(), num_nodes=num_nodes)


def stale_clique_nodes(clique: ComputeDomainClique, pod_nodes: Collection[str]) -> list[str]:
    """Nodes of entries whose daemon pod is gone (no pod of this CD on that node)."""
    return [d.node_name for d in clique.daemons if d.node_name not in pod_nodes]


def full_clique_nodes(
    cliques: Iterable[ComputeDomainClique], pods: Iterable[DaemonPod], max_nodes: int
) -> list[tuple[str, str]]:
    """``(node, cliqueID)`` of daemons that cannot get a slot because their clique is full."""
    by_id = {c.clique_id: c for c in cliques}
    out = []
    for pod in pods:
        clique = by_id.get(pod.clique_id or "")
        if clique is None or not pod.node_name or clique.daemon(pod.node_name) is not None:
            continue
        if len(clique.daemons) >= max_nodes:
            out.append((pod.node_name, clique.clique_id))
    return sorted(out)


def _normalise(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    if not raw:
        return {}
    nodes = {n.get("name"): dict(n) for n in raw.get("nodes") or []}
    return {**{k: v for k, v in raw.items() if k != "nodes"}, "nodes": nodes}


def differs(current: Mapping[str, Any] | None, desired: ComputeDomainStatus) -> bool:
    """Whether the stored raw status differs from ``desired`` (node order does not matter)."""
    return _normalise(current) != _normalise(desired.to_dict())


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Transition:
    """A change of one node's entry worth telling a person about."""

    node: str
    kind: str
    """``joined`` (new entry), ``lost`` (was Ready, node now NotReady or deleted) or ``left``."""
    entry: ComputeDomainNode | None


def transitions(
    old: Sequence[ComputeDomainNode],
    new: Sequence[ComputeDomainNode],
    node_ready: Mapping[str, bool],
) -> list[Transition]:
    """Entries that joined, left, or were lost with their node between two statuses."""
    before = {n.name: n for n in old}
    after = {n.name: n for n in new}
    out = [Transition(node=k, kind="joined", entry=v) for k, v in after.items() if k not in before]
    out += [Transition(node=k, kind="left", entry=v) for k, v in before.items() if k not in after]
    for name, entry in after.items():
        prev = before.get(name)
        if (
            prev is not None
            and prev.status is Readiness.READY
            and entry.status is Readiness.NOT_READY
            and not node_ready.get(name, False)
        ):
            out.append(Transition(node=name, kind="lost", entry=entry))
    return sorted(out, key=lambda t: (t.node, t.kind))
