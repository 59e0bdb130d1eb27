"""Why a NotReady status entry is NotReady, and who was a member of the formed domain.

Pure; ``status.derive`` calls ``why`` for each NotReady entry of a CD's own cliques, with the
``Context`` of one pass. The answer is a ``verdict.Why``: its cause (the node gone or NotReady,
held by another CD, its clique full, a lost member or one still forming) and the words for it,
checked in that order; a daemon that says why its IMEX cannot start, or restarts, says so.
``member`` (Ready in the previous status, or NotReady there while the domain's reason was
already ``NodeNotReady`` or ``PeerUnreachable``) decides between lost and forming; ``by_name``
indexes a status's entries once per pass so that asking about every entry is no scan each.
``lost_text`` words the ``PeerUnreachable`` cause (``status._unreachable``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from compute_domains.api import conditions
from compute_domains.api.computedomain import ComputeDomainNode, ComputeDomainStatus, Readiness
from compute_domains.controller import verdict

if TYPE_CHECKING:  # status imports this module: DaemonPod is only named in a type
    from compute_domains.controller.status import DaemonPod


NOT_READY_YET = "its IMEX daemon is not Ready yet"


def lost_text(reporters: Mapping[str, str]) -> str:
    """The words for an entry its IMEX peers lost (``reporters``: reporter → since when)."""
    since = min(reporters.values())
    return (
        f"its IMEX peers lost their links to it: {', '.join(sorted(reporters))} "
        f"(since {since}); the Node may still read Ready until its grace runs out"
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """What ``why`` reads about one pass of ``status.derive``."""

    node_ready: Mapping[str, bool]
    by_node: Mapping[str, list[DaemonPod]]
    registered: Collection[str]
    full: Mapping[str, str]
    max_nodes: int
    previous: ComputeDomainStatus | None
    before: Mapping[str, ComputeDomainNode]
    held_by: Mapping[str, str]


def by_name(st: ComputeDomainStatus | None) -> dict[str, ComputeDomainNode]:
    """The entries of ``st`` by node name, the first of a name winning (as ``st.node`` finds
    it): one dict per pass, so that asking about every entry is not a scan of the list each."""
    out: dict[str, ComputeDomainNode] = {}
    for entry in st.nodes if st is not None else ():
        out.setdefault(entry.name, entry)
    return out


def member(
    node: str,
    previous: ComputeDomainStatus | None,
    before: Mapping[str, ComputeDomainNode] | None = None,
) -> bool:
    """Whether ``node`` belonged to the formed domain: Ready in the previous status, or still
    NotReady there while the domain's reason was already ``NodeNotReady`` or
    ``PeerUnreachable`` (a member that went away stays one until it is back or leaves).
    ``before``: ``by_name(previous)``, for callers that ask about many nodes."""
    if before is not None:
        entry = before.get(node)
    else:
        entry = previous.node(node) if previous is not None else None
    if entry is None or previous is None:
        return False
    if entry.status is Readiness.READY:
        return True
    ready = previous.condition(conditions.READY)
    return ready is not None and ready.reason in (
        conditions.NODE_NOT_READY,
        conditions.PEER_UNREACHABLE,
    )


def why(entry: ComputeDomainNode, ctx: Context) -> verdict.Why:
    """Why the NotReady ``entry`` is NotReady."""
    node = entry.name
    lost, forming = verdict.Cause.LOST, verdict.Cause.FORMING
    if node not in ctx.node_ready:
        return verdict.Why(cause=lost, text="the node is gone")
    if not ctx.node_ready[node]:
        return verdict.Why(cause=lost, text="the node is NotReady")
    if node in ctx.held_by:  # issue 29: its pods wait on a node another CD holds
        return verdict.Why(cause=verdict.Cause.FORMING, text=ctx.held_by[node])
    if node in ctx.full:
        return verdict.Why(
            cause=verdict.Cause.FULL,
            text=f"clique {ctx.full[node]} is full ({ctx.max_nodes} slots)",
        )
    cause = lost if member(node, ctx.previous, ctx.before) else forming
    pods = ctx.by_node.get(node) or []
    if not pods:
        text = "its IMEX daemon pod is gone" if cause is lost else "waiting for its IMEX daemon pod"
        return verdict.Why(cause=cause, text=text)
    pod = next((p for p in pods if p.ip == entry.ip_address), pods[0])
    if pod.blocked and not pod.ready:  # the daemon says why its IMEX cannot start
        return verdict.Why(cause=cause, text=pod.blocked)
    if pod.restarts and not pod.ready:
        return verdict.Why(
            cause=lost, text=f"its IMEX daemon is restarting (restart {pod.restarts})"
        )
    if pod.clique_id != "" and node not in ctx.registered:
        return verdict.Why(cause=cause, text="its IMEX daemon has not registered yet")
    return verdict.Why(cause=cause, text=NOT_READY_YET)
