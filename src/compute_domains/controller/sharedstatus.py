"""Pure derivation of a per-clique ComputeDomain's status from Nodes and shared registries.

A per-clique CD X has no daemon pods and no cliques of its own: the clique's shared IMEX serves
it, one resident agent per node (``api.sharedimex``). docs/status.md's Ready rules apply as for
a per-domain CD (``verdict.judge`` decides); what changes is where the entries come from:

- X's nodes are the Nodes annotated ``compute-domains/channel.<X>`` (the plugin writes it when
  it prepares X's first claim there, removes it with the last);
- a node's entry (``name``, ``ipAddress``, ``cliqueID``, ``index``, ``status``) is its entry in
  the registry ``shared-imex.<C>`` of its clique ``C`` (the Node's ``nvidia.com/gpu.clique``
  label), copied, so indices are the shared IMEX's and never move while it runs. It is Ready
  when the registry entry says Ready (the agent's IMEX answers), the node's agent pod is Ready
  with the entry's IP (``api.agentpods``: an agent killed with ``kill -9`` leaves its entry
  Ready until its restarted process registers again, but its pod turns NotReady at once, and
  its shared IMEX, its child, is gone) and the Node is Ready; the agent pod Ready again with
  the same IP (the same slot) makes it Ready again on the same index;
- an annotated node without a registry entry is NotReady ("its shared IMEX ... has not
  registered yet"; ``CliqueFull`` when the registry has every slot taken), listed with its
  previous entry or a new one (its clique label, index -1, no IP);
- a registry entry turning NotReady (its IMEX crashed) makes the entry NotReady, so every CD the
  node serves turns NotReady (``NodeNotReady`` for a member); when the node's agent wrote why its
  IMEX cannot start (``compute-domains/imex-blocked.<index>``, ``sharedimex.Blocked``: a host
  ``nvidia-imex.service`` holds the session), that is the node's NotReady text (``blocked``
  also gives it to the status sync, which posts the Event on the CD);
- the agents' lost-peers reports on the registry (``compute-domains/lost-peers.<index>``, the
  per-domain daemon's note) are judged as on a CD's own clique (``peerloss``): per registry,
  over the registry's members that are the CD's nodes, so a node is ``PeerUnreachable`` in
  every CD that has both it and a Ready peer that lost it, and in no other;
- the rules for nodes that hold a workload claim (always listed, NotReady without an entry: "no
  IMEX channel of this ComputeDomain on the node yet" before its claim is prepared) and for
  nodes that hold none (listed only while the Node is Ready) are ``status``'s;
- the Ready condition's message ends with X's channels, from the registries' channel
  annotations: ``IMEX channel 5 on clique <C>`` (``IMEX channels: 5 on clique <A>, 7 on clique
  <B>`` when X spans two cliques); nothing is added to the status's fields (CRD compatibility).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence

from compute_domains.api import agentpods, conditions, names, sharedimex
from compute_domains.api.clique import CliqueDaemon, ComputeDomainClique
from compute_domains.api.computedomain import ComputeDomainNode, ComputeDomainStatus, Readiness
from compute_domains.controller import claims, notready, peerloss, pending, status, verdict


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Served:
    """A Node annotated with the CD's channel."""

    name: str
    clique_id: str
    """The Node's ``nvidia.com/gpu.clique`` label ("" without one)."""
    channel: int


def channels_text(channels: Mapping[str, int]) -> str:
    """``IMEX channel <n> on clique <C>`` for each clique (clique ID → channel)."""
    if not channels:
        return ""
    parts = [f"{n} on clique {c}" for c, n in sorted(channels.items())]
    if len(parts) == 1:
        return f"IMEX channel {parts[0]}"
    return f"IMEX channels: {', '.join(parts)}"


def _live(
    entry: CliqueDaemon, node_ready: Mapping[str, bool], agents: Sequence[agentpods.AgentPod]
) -> bool:
    """Whether a registry entry counts as Ready: it says so, its agent pod (with its IP) is
    Ready and its Node is Ready."""
    return (
        entry.status is Readiness.READY
        and node_ready.get(entry.node_name, False)
        and agentpods.serving(agents, node=entry.node_name, ip=entry.ip_address)
    )


def _unreachable(
    registries: Iterable[ComputeDomainClique],
    node_ready: Mapping[str, bool],
    nodes: Collection[str],
    agents_on: Mapping[str, Sequence[agentpods.AgentPod]],
) -> peerloss.Reports:
    """Ready entries of the CD (``nodes``) whose IMEX peers in the CD lost them, registry by
    registry (``status._unreachable``'s rule for a CD's own cliques: a reporter outside the
    CD neither votes nor counts, as its link to the node carries none of the CD's imports)."""
    out: peerloss.Reports = {}
    for registry in registries:
        members = [d for d in registry.daemons if d.node_name in nodes]
        found = {
            reporter: {n: since for n, since in lost.items() if n in nodes}
            for reporter, lost in peerloss.reports(registry).items()
            if reporter in nodes
        }
        if not any(found.values()):
            continue
        ready = {d.node_name: _live(d, node_ready, agents_on.get(d.node_name, ())) for d in members}
        for node, reporters in peerloss.judge(found, list(ready), ready).items():
            if ready.get(node):
                out[node] = reporters
    return out


def _blocked_of(registry: ComputeDomainClique | None, node: str) -> sharedimex.Blocked | None:
    entry = registry.daemon(node) if registry is not None else None
    if registry is None or entry is None or entry.status is Readiness.READY:
        return None
    return sharedimex.blocked_of(
        registry.metadata.annotations, index=entry.index, node=node, ip=entry.ip_address
    )


def blocked(
    served: Iterable[Served], registries: Mapping[str, ComputeDomainClique]
) -> dict[str, sharedimex.Blocked]:
    """Served node → why its shared IMEX cannot start, as its current agent wrote it into the
    registry (only while its entry is NotReady)."""
    out = {}
    for node in served:
        note = _blocked_of(registries.get(node.clique_id), node.name)
        if note is not None:
            out[node.name] = note
    return out


def _where(clique_id: str) -> str:
    return f"its shared IMEX (clique {clique_id})"


def derive(
    *,
    num_nodes: int,
    served: Iterable[Served],
    registries: Mapping[str, ComputeDomainClique],
    channels: Mapping[str, int],
    node_ready: Mapping[str, bool],
    agents: Sequence[agentpods.AgentPod],
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
) -> status.Derived:
    """The status of one per-clique CD (the module docstring says how).

    ``served``: the Nodes annotated with its channel; ``registries``: clique ID → that clique's
    shared registry; ``channels``: clique ID → the CD's channel there (registry annotations);
    ``agents``: the resident agents' pods (at least those of the served nodes); the other
    arguments are ``status.derive``'s.
    """
    held_by = held_by or {}
    node_cliques = node_cliques or {}
    served = sorted(served, key=lambda s: s.name)
    before = notready.by_name(previous)
    agents_on: dict[str, list[agentpods.AgentPod]] = {}
    for agent in agents:  # each entry asks about its own node's agents, not all of them
        agents_on.setdefault(agent.node_name, []).append(agent)
    entries: dict[str, ComputeDomainNode] = {}
    why: dict[str, verdict.Why] = {}
    full: list[tuple[str, str]] = []
    for node in served:
        registry = registries.get(node.clique_id)
        entry = registry.daemon(node.name) if registry is not None else None
        if entry is not None:
            ready = _live(entry, node_ready, agents_on.get(node.name, ()))
            entries[node.name] = dataclasses.replace(
                entry.to_node(), status=Readiness.READY if ready else Readiness.NOT_READY
            )
            continue
        entries[node.name] = _unlisted(node.name, node.clique_id, before)
        if registry is not None and len(registry.daemons) >= max_nodes:
            full.append((node.name, node.clique_id))
    lost = _unreachable(registries.values(), node_ready, entries.keys(), agents_on)
    for node_name in [n for n in lost if n in entries]:
        entries[node_name] = dataclasses.replace(entries[node_name], status=Readiness.NOT_READY)
    held = {c.node for c in workload if c.placed}
    workload_nodes = sorted(held)
    for name in [n for n in entries if n not in held and not node_ready.get(n, False)]:
        del entries[name]  # holds nothing (its workload left) and is down
    for name in workload_nodes:
        if name not in entries:
            entries[name] = _unlisted(name, node_cliques.get(name, ""), before)
    by_name = {s.name: s for s in served}
    for listed in entries.values():
        if listed.status is Readiness.READY:
            continue
        why[listed.name] = _why(
            listed.name,
            by_name.get(listed.name),
            registries,
            node_ready,
            previous,
            before,
            held_by,
            dict(full),
            max_nodes,
            lost.get(listed.name),
            agents_on.get(listed.name, ()),
        )
    judged = verdict.judge(
        verdict.Facts(
            entries=tuple(entries.values()),
            why=why,
            workload_nodes=tuple(workload_nodes),
            num_nodes=num_nodes,
            full=tuple((n, c) for n, c in full if n in entries),
            max_nodes=max_nodes,
            template_conflict=template_conflict,
            waited_for=None if waited_for is None else tuple(waited_for),
            generation=generation,
            extra=tuple(extra),
            pending=tuple(waiting),
            holders=tuple(holders),
            refusal=refusal,
            channels=channels_text(channels),
        )
    )
    st = ComputeDomainStatus(
        status=Readiness.READY if judged.ready else Readiness.NOT_READY,
        nodes=tuple(entries.values()),
        conditions=judged.conditions,
    )
    return status.Derived(status=st, why=why)


def _unlisted(
    name: str, clique_id: str, before_entries: Mapping[str, ComputeDomainNode]
) -> ComputeDomainNode:
    """The NotReady entry of a node without a registry entry: its previous one (from
    ``before_entries``, ``notready.by_name``), or a new one."""
    before = before_entries.get(name)
    if before is not None:
        return dataclasses.replace(before, status=Readiness.NOT_READY)
    return ComputeDomainNode(
        name=name,
        ip_address="",
        clique_id=clique_id,
        index=names.NON_FABRIC_INDEX,
        status=Readiness.NOT_READY,
    )


def _why(
    node: str,
    served: Served | None,
    registries: Mapping[str, ComputeDomainClique],
    node_ready: Mapping[str, bool],
    previous: ComputeDomainStatus | None,
    before: Mapping[str, ComputeDomainNode],
    held_by: Mapping[str, str],
    full: Mapping[str, str],
    max_nodes: int,
    lost: Mapping[str, str] | None,
    agents: Sequence[agentpods.AgentPod],
) -> verdict.Why:
    """Why the NotReady entry of ``node`` is NotReady (``agents``: at least those on
    ``node``; ``before``: ``notready.by_name(previous)``)."""
    if node not in node_ready:
        return verdict.Why(cause=verdict.Cause.LOST, text="the node is gone")
    if not node_ready[node]:
        return verdict.Why(cause=verdict.Cause.LOST, text="the node is NotReady")
    if node in held_by:
        return verdict.Why(cause=verdict.Cause.FORMING, text=held_by[node])
    if node in full:
        return verdict.Why(
            cause=verdict.Cause.FULL,
            text=f"clique {full[node]} is full ({max_nodes} slots of its shared IMEX)",
        )
    cause = verdict.Cause.LOST if notready.member(node, previous, before) else verdict.Cause.FORMING
    if served is None:
        return verdict.Why(
            cause=cause,
            text="no IMEX channel of this ComputeDomain on the node yet (its claim is not "
            "prepared)",
        )
    if not served.clique_id:
        return verdict.Why(
            cause=cause,
            text=f"the node has no {names.GPU_CLIQUE_LABEL} label, so no shared IMEX serves it",
        )
    registry = registries.get(served.clique_id)
    entry = registry.daemon(node) if registry is not None else None
    if entry is None:
        return verdict.Why(cause=cause, text=f"{_where(served.clique_id)} has not registered yet")
    note = _blocked_of(registry, node)
    if note is not None:  # the agent says why its IMEX cannot start (a held session)
        return verdict.Why(cause=cause, text=note.message)
    if entry.status is Readiness.READY and not agentpods.serving(
        agents, node=node, ip=entry.ip_address
    ):  # its agent died (kill -9): the entry says Ready until a new process registers
        return verdict.Why(
            cause=cause, text=agentpods.not_serving_text(agents, node=node, ip=entry.ip_address)
        )
    if lost:
        since = min(lost.values())
        return verdict.Why(
            cause=verdict.Cause.UNREACHABLE,
            text=(
                f"its IMEX peers lost their links to it: {', '.join(sorted(lost))} "
                f"(since {since}); the Node may still read Ready until its grace runs out"
            ),
        )
    return verdict.Why(cause=cause, text=f"{_where(served.clique_id)} is not Ready")
