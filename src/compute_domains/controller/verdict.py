"""Is a ComputeDomain Ready, and if not, why: the ``Ready`` and ``Deleting`` conditions (pure).

The definition a job can trust (docs/status.md): a CD is Ready exactly when
- at least one of its workload claims is allocated to a node (``NoWorkload`` otherwise: with
  no pod placed yet there is nothing a job could start on, whatever ``numNodes`` says);
- no workload claim of it waits for the scheduler: a pod of the job that is not placed keeps
  the CD NotReady (``PodsPending`` once the scheduler said why, quoting it and naming any other
  CD that holds nodes; before that, the pod is named in the other reasons' messages);
- every listed node is Ready, and every node that holds or waits for a workload claim is
  listed (``status.derive`` makes sure of that), so a NotReady member keeps the CD NotReady;
- with ``numNodes > 0``, at least that many nodes are listed (warm spares count: they are
  members like any other; fewer listed says how many hold claims and why the rest is missing);
- its workload ResourceClaimTemplate is its own (``TemplateConflict`` otherwise).

Reasons when not Ready, first match wins: a refusal (``InvalidImexScope``,
``ImexScopeNeedsResidentAgents``, ``AllocationModeAllNotIsolated``: the controller created
nothing, ``scope``), ``TemplateConflict``, ``CliqueFull`` (a node's daemon
cannot get a slot: the message names the node and the clique), ``NodeNotReady`` (a member
node or its daemon went away: node NotReady or deleted, daemon gone or restarting; the message
names each node and what is wrong), ``PeerUnreachable`` (a member's IMEX peers lost their links
to it: the message names it and the peers), ``PodsPending``, ``NoWorkload``, ``Forming`` (daemons
still starting, or fewer than ``numNodes`` listed). A status without a placed workload never
contains the word "nodes" in its messages but where a scheduler's message is quoted (NVIDIA's
daemon-shutdown test greps the status for it). A per-node ``Why`` is computed by ``status``;
this module only chooses and words the verdict. A per-clique CD's Ready message ends with its
channels (``channels``: ``IMEX channel 5 on clique <C>``), whatever the reason.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence

from compute_domains.api import conditions, names
from compute_domains.api.computedomain import ComputeDomainNode, Readiness
from compute_domains.controller import pending as pending_pods

_LISTED = 5
"""How many nodes a message names before it says "and N more"."""


class Cause(enum.StrEnum):
    """Why one listed node is NotReady."""

    LOST = conditions.NODE_NOT_READY
    """A member went away: its node, or its daemon (gone, restarting)."""
    FULL = conditions.CLIQUE_FULL
    """Its daemon cannot get a slot in its clique."""
    UNREACHABLE = conditions.PEER_UNREACHABLE
    """Its IMEX peers lost their links to it (``peerloss``), while Kubernetes still sees it."""
    FORMING = conditions.FORMING
    """Its daemon is on its way (not placed, not registered, not Ready yet)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Why:
    """Why one node's entry is NotReady."""

    cause: Cause
    text: str
    """What is wrong, for a person: "the node is NotReady", "its IMEX daemon pod is gone"."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Facts:
    """Everything the verdict depends on."""

    entries: Sequence[ComputeDomainNode]
    why: Mapping[str, Why]
    """For each NotReady entry."""
    workload_nodes: Sequence[str]
    """Nodes that hold or wait for a workload claim."""
    num_nodes: int
    full: Sequence[tuple[str, str]]
    """``(node, cliqueID)`` of daemons that cannot join a full clique."""
    max_nodes: int
    template_conflict: str = ""
    waited_for: Sequence[str] | None = None
    """Pods a deletion waits for; None while the CD is not being deleted."""
    generation: int = 0
    extra: Sequence[conditions.Condition] = ()
    """Conditions judged elsewhere (``WarmNodes``), appended as they are."""
    pending: Sequence[pending_pods.PendingPod] = ()
    """Pods of the job whose workload claim is not allocated (they wait for the scheduler)."""
    holders: Sequence[str] = ()
    """Other CDs that hold nodes, for a person (``pending.holders``); said with ``pending``."""
    refusal: tuple[str, str] | None = None
    """``(reason, message)`` when the controller refuses to serve the CD (it wins over all)."""
    channels: str = ""
    """Appended to the Ready message (a per-clique CD's channels, ``sharedstatus``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """The conditions (``lastTransitionTime`` unset) and whether the CD is Ready."""

    ready: bool
    conditions: tuple[conditions.Condition, ...]


def _some(items: Sequence[str], sep: str = ", ") -> str:
    """The first few ``items``, and how many more there are."""
    shown = sep.join(items[:_LISTED])
    if len(items) > _LISTED:
        shown += f"{sep}and {len(items) - _LISTED} more"
    return shown


def _nodes(facts: Facts, cause: Cause) -> list[str]:
    found = sorted(facts.why.items())
    return [f"node {name}: {why.text}" for name, why in found if why.cause is cause]


def _ready_condition(facts: Facts) -> tuple[bool, str, str]:
    """``(ready, reason, message)`` of the Ready condition."""
    listed = len(facts.entries)
    ready_count = sum(1 for e in facts.entries if e.status is Readiness.READY)
    counts = f"{ready_count} of {listed} nodes Ready"
    if facts.refusal is not None:
        return False, *facts.refusal
    if facts.template_conflict:
        return False, conditions.TEMPLATE_CONFLICT, facts.template_conflict
    if facts.full:
        parts = [
            f"node {node} cannot join clique {clique}: it is full ({facts.max_nodes} of "
            f"{facts.max_nodes} slots, maxNodesPerIMEXDomain)"
            for node, clique in facts.full
        ]
        return False, conditions.CLIQUE_FULL, "; ".join(parts)
    lost = _nodes(facts, Cause.LOST)
    unreachable = _nodes(facts, Cause.UNREACHABLE)
    if lost:
        return False, conditions.NODE_NOT_READY, f"{counts}; {_some(lost + unreachable, '; ')}"
    if unreachable:
        return False, conditions.PEER_UNREACHABLE, f"{counts}; {_some(unreachable, '; ')}"
    told = [p for p in facts.pending if p.message]
    if told:
        parts = [_waits(facts.pending)]
        if facts.workload_nodes:
            parts.insert(0, counts)
        return False, conditions.PODS_PENDING, "; ".join([*parts, *facts.holders])
    if not facts.workload_nodes:
        # No "nodes" here: NVIDIA's daemon-shutdown test greps this status for that word.
        wanted = f" (numNodes {facts.num_nodes})" if facts.num_nodes else ""
        message = (
            "no workload claim of this ComputeDomain is allocated yet: Ready needs its pods "
            f"placed and an IMEX daemon Ready wherever one of them runs{wanted}"
        )
        if facts.pending:
            message += "; " + _waits(facts.pending)
        return False, conditions.NO_WORKLOAD, message
    forming = _nodes(facts, Cause.FORMING)
    if forming or listed < facts.num_nodes or facts.pending:
        parts = [counts]
        if listed < facts.num_nodes:
            parts.append(_too_few(facts))
        if forming:
            parts.append("waiting for " + _some(forming, "; "))
        if facts.pending:
            parts.append(_waits(facts.pending))
        return False, conditions.FORMING, "; ".join(parts)
    return True, conditions.ALL_NODES_READY, f"all {listed} nodes Ready"


def _waits(pending: Sequence[pending_pods.PendingPod]) -> str:
    """``N pod(s) of the job wait for the scheduler: ...``."""
    described = [p.describe() for p in pending]
    return f"{len(pending)} pod(s) of the job wait for the scheduler: {_some(described, '; ')}"


def _too_few(facts: Facts) -> str:
    """Why fewer than ``numNodes`` nodes are listed, for a person."""
    listed, holding = len(facts.entries), len(facts.workload_nodes)
    return (
        f"{listed} of {facts.num_nodes} nodes (numNodes) listed: {holding} hold a workload claim, "
        f"{listed - holding} are warm spares or daemons whose workload left; IMEX daemons run "
        "only on nodes where a pod's claim of this ComputeDomain is placed, or that its "
        f"{names.WARM_NODES_ANNOTATION} annotation selects (warm spares)"
    )


def judge(facts: Facts) -> Verdict:
    """The Ready (and, during a waiting deletion, Deleting) conditions of one CD."""
    ready, reason, message = _ready_condition(facts)
    if facts.channels:
        message = f"{message}; {facts.channels}"
    out = [
        conditions.Condition(
            type=conditions.READY,
            status=conditions.TRUE if ready else conditions.FALSE,
            reason=reason,
            message=message,
            observed_generation=facts.generation,
        )
    ]
    if facts.waited_for:
        pods = list(facts.waited_for)
        out.append(
            conditions.Condition(
                type=conditions.DELETING,
                status=conditions.TRUE,
                reason=conditions.WAITING_FOR_WORKLOAD,
                message=(
                    f"deletion waits for {len(pods)} pod(s) that still hold its claims: "
                    f"{_some(pods)}; it finishes once they are gone (delete them to finish now)"
                ),
                observed_generation=facts.generation,
            )
        )
    return Verdict(ready=ready, conditions=(*out, *facts.extra))
