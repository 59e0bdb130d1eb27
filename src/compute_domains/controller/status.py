"""Pure derivation of a ComputeDomain's status entries from cliques, daemon pods, claims and nodes.

Rules (ours; upstream's §8.2 plus the truthfulness it lacks; docs/status.md for people):
- Fabric entries come from the CD's cliques (``daemons[]``, in clique-name then index order);
  their ``(cliqueID, index)`` is copied, never reassigned here, so it stays stable while the
  daemon lives and never swaps between nodes.
- An entry from a clique is listed while a daemon pod of this CD exists on its node; it is
  Ready only when its clique entry says Ready AND that daemon pod is Ready AND the Node is
  Ready; a NotReady or deleted Node makes it NotReady.
- Non-fabric nodes (pod label ``cliqueID`` present and empty) get an entry built from the pod:
  cliqueID "", index -1, Ready when the pod and the Node are.
- A node that holds (or waits for) a workload claim of the CD is always listed: with no entry
  from the rules above (its daemon pod is gone, restarting after a reboot, not registered yet,
  or its clique is full) it gets its entry of the previous status, or a new one (the Node's
  clique label, index -1, no IP), NotReady either way. So a member never drops out of the
  status while its workload is there; it leaves with its workload (and daemon).
- A node that holds no workload claim (a warm spare, or a daemon whose workload left) is listed
  only while its Node is Ready: a failed warm spare drops out (it holds nothing), while a node
  that holds a workload keeps the rule above.
- A Ready entry whose IMEX peers lost it (``peerloss``: their daemons' reports, judged) is
  NotReady (``PeerUnreachable``) until no counted report names it; it is Ready again only
  while its own daemon, pod and Node say Ready too. Kubernetes may still see its Node Ready.
- Node names are unique (the list-map key); the first entry of a node wins.
- Why a NotReady entry is NotReady is ``notready.why``'s.
- ``status.status`` and the conditions are ``verdict.judge``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from compute_domains.api import conditions, names
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import ComputeDomainNode, ComputeDomainStatus, Readiness
from compute_domains.controller import claims, notready, peerloss, pending, verdict


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
    restarts: int = 0
    """The highest ``restartCount`` of its containers (a reboot counts as a restart)."""
    blocked: str = ""
    """Why its IMEX cannot start, from its ``compute-domains/imex-blocked`` annotation (the
    daemon sets it, e.g. a host nvidia-imex.service holding the session); "" for nothing."""

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
        containers = (status.containerStatuses or []) if status is not None else []
        return cls(
            name=meta.name or "",
            node_name=(spec.nodeName or "") if spec is not None else "",
            ip=(status.podIP or "") if status is not None else "",
            ready=ready,
            clique_id=(meta.labels or {}).get(names.CLIQUE_ID_LABEL),
            restarts=max((c.restartCount or 0 for c in containers), default=0),
            blocked=(meta.annotations or {}).get(names.IMEX_BLOCKED_ANNOTATION, ""),
        )


def node_is_ready(node: Any) -> bool:
    """Whether a lightkube Node's ``Ready`` condition is True."""
    conditions = (node.status.conditions or []) if node.status is not None else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _ready(flag: bool) -> Readiness:
    return Readiness.READY if flag else Readiness.NOT_READY


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Derived:
    """A derived status and, for each NotReady entry, why (for conditions and Events)."""

    status: ComputeDomainStatus
    why: Mapping[str, verdict.Why]


def _daemon_entries(
    cliques: Iterable[ComputeDomainClique],
    by_node: Mapping[str, list[DaemonPod]],
    node_ready: Mapping[str, bool],
) -> dict[str, ComputeDomainNode]:
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
    return entries


def _held_entry(
    node: str,
    before_entries: Mapping[str, ComputeDomainNode],
    pods: Sequence[DaemonPod],
    node_cliques: Mapping[str, str],
) -> ComputeDomainNode:
    """The NotReady entry of a node that holds workload but has no daemon entry
    (``before_entries``: the previous status's entries, ``notready.by_name``)."""
    before = before_entries.get(node)
    if before is not None:
        return dataclasses.replace(before, status=Readiness.NOT_READY)
    pod = next((p for p in pods if p.clique_id is not None), pods[0] if pods else None)
    clique = pod.clique_id if pod is not None and pod.clique_id is not None else None
    return ComputeDomainNode(
        name=node,
        ip_address=pod.ip if pod is not None else "",
        clique_id=clique if clique is not None else node_cliques.get(node, ""),
        index=names.NON_FABRIC_INDEX,
        status=Readiness.NOT_READY,
    )


def derive(
    *,
    num_nodes: int,
    cliques: Iterable[ComputeDomainClique],
    pods: Iterable[DaemonPod],
    node_ready: Mapping[str, bool],
    workload: Iterable[claims.WorkloadClaim] = (),
    previous: ComputeDomainStatus | None = None,
    node_cliques: Mapping[str, str] | None = None,
    max_nodes: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
    template_conflict: str = "",
    waited_for: Sequence[str] | None = None,
    generation: int = 0,
    extra: Sequence[conditions.Condition] = (),
    waiting: Sequence[pending.PendingPod] = (),
    holders: Sequence[str] = (),
    held_by: Mapping[str, str] | None = None,
    refusal: tuple[str, str] | None = None,
) -> Derived:
    """The status of one CD.

    ``node_ready`` maps node name to readiness (absent = deleted); ``node_cliques`` a node's
    ``nvidia.com/gpu.clique`` label; ``waited_for`` the pods a deletion waits for (None: the CD
    is not being deleted); ``extra`` conditions (``WarmNodes``) are appended; ``waiting`` the
    pods of the job whose claims are not allocated, ``holders`` the other CDs that hold nodes
    (``pending``); ``held_by`` maps a workload node that another CD holds to the words for it
    (``heldnodes.held_text``); ``refusal`` the ``(reason, message)`` of a CD the controller
    refuses to serve (``scope``). Conditions come without ``lastTransitionTime`` (see
    ``conditions.merged``).
    """
    cliques, pods = list(cliques), list(pods)
    by_node: dict[str, list[DaemonPod]] = {}
    for pod in pods:
        if pod.node_name:
            by_node.setdefault(pod.node_name, []).append(pod)
    entries = _daemon_entries(cliques, by_node, node_ready)
    unreachable = _unreachable(cliques, entries)
    for node in unreachable:
        entries[node] = dataclasses.replace(entries[node], status=Readiness.NOT_READY)
    held = {c.node for c in workload if c.placed}
    workload_nodes = sorted(held)
    for node in [n for n in entries if n not in held and not node_ready.get(n, False)]:
        del entries[node]  # holds nothing (a warm spare, or its workload left) and is down
    before = notready.by_name(previous)
    for node in workload_nodes:
        if node not in entries:
            entries[node] = _held_entry(node, before, by_node.get(node, []), node_cliques or {})
    full = full_clique_nodes(cliques, pods, max_nodes)
    registered = {d.node_name for c in cliques for d in c.daemons}
    context = notready.Context(
        node_ready=node_ready,
        by_node=by_node,
        registered=registered,
        full={node: clique for node, clique in full},
        max_nodes=max_nodes,
        previous=previous,
        before=before,
        held_by=held_by or {},
    )
    why = {
        e.name: notready.why(e, context)
        for e in entries.values()
        if e.status is Readiness.NOT_READY
    }
    for node, reporters in unreachable.items():
        if why[node].text == notready.NOT_READY_YET:  # nothing else is wrong with it
            why[node] = verdict.Why(
                cause=verdict.Cause.UNREACHABLE, text=notready.lost_text(reporters)
            )
    judged = verdict.judge(
        verdict.Facts(
            entries=tuple(entries.values()),
            why=why,
            workload_nodes=tuple(workload_nodes),
            num_nodes=num_nodes,
            full=tuple(full),
            max_nodes=max_nodes,
            template_conflict=template_conflict,
            waited_for=None if waited_for is None else tuple(waited_for),
            generation=generation,
            extra=tuple(extra),
            pending=tuple(waiting),
            holders=tuple(holders),
            refusal=refusal,
        )
    )
    st = ComputeDomainStatus(
        status=Readiness.READY if judged.ready else Readiness.NOT_READY,
        nodes=tuple(entries.values()),
        conditions=judged.conditions,
    )
    return Derived(status=st, why=why)


def _unreachable(
    cliques: Sequence[ComputeDomainClique], entries: Mapping[str, ComputeDomainNode]
) -> peerloss.Reports:
    """Ready entries whose IMEX peers lost them (``peerloss.judge``, clique by clique)."""
    out: peerloss.Reports = {}
    for clique in cliques:
        found = peerloss.reports(clique)
        if not found:
            continue
        members = [d.node_name for d in clique.daemons if d.node_name in entries]
        ready = {m: entries[m].status is Readiness.READY for m in members}
        for node, reporters in peerloss.judge(found, members, ready).items():
            if ready.get(node):
                out[node] = reporters
    return out


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
