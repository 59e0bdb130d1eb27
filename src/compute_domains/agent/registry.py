"""The clique's shared registry ``shared-imex.<cliqueID>`` as a resident agent writes it (pure).

The registry (``api.sharedimex``'s contract) is a ComputeDomainClique in the driver namespace,
labelled ``compute-domains/imex-scope=perClique`` and with the clique ID label, *without* the CD
label (no CD's teardown touches it) and without owners (it outlives every agent). Each agent
that runs the clique's shared ``nvidia-imex`` writes only its own entry; these functions say
what the whole object should be after that write, for a replace with the read object's
resourceVersion (a concurrent writer, such as the kubelet plugin adding a channel annotation,
makes it conflict, and the agent re-reads and plans again, so nothing it did not plan is ever
dropped):

* :func:`plan`: our node registered with our IP (``ComputeDomainClique.with_registered``: a
  node keeps its index for good, ``lastIndices`` remembers it) and its status ours; a missing
  registry is made (:func:`new_registry`), a registry lacking its labels gets them. An entry
  whose IP changes (a new agent pod) is written with our status, not the old pod's. The index
  our running IMEX uses is asked for again when the registry lost our entry (deleted and made
  anew), so it does not move under IMEX while it is free.
* the plan also carries our node's reports, as annotations keyed by our index
  (``api.sharedimex``): the peers our IMEX lost (``compute-domains/lost-peers.<index>``, the
  per-domain daemon's note, ``cliqueentry.lost_peers_of``) and why our IMEX cannot start
  (``compute-domains/imex-blocked.<index>``); each is removed when there is nothing to report.
* :func:`plan_stopped`: our entry NotReady, kept (the index stays), when its IP is ours.
* :func:`is_registered`: the registry lists our node with our IP at an index that is ours
  (IMEX may start: our own name resolves once the hosts block is written from it).
* :func:`valid_position`: the earliest claim of an index wins. Entries are appended without a
  resourceVersion (``registrypatch``), so two agents may claim the same index at once; the API
  server serialises the appends, and the entry further down the list is void: no reader maps
  it, its agent never starts IMEX on it and re-plans (:func:`plan` then moves it to a free
  index: the free ones go, lowest first, to the void entries in list order, so the losers of
  one race claim distinct ones and the indices stay compact). A valid entry stays valid:
  entries are only ever appended, and an index is never changed in place.

None from a plan means nothing to write.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from compute_domains.api import names, sharedimex
from compute_domains.api.clique import CliqueDaemon, CliqueFullError, ComputeDomainClique
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import cliqueentry


def new_registry(clique_id: str, namespace: str) -> ComputeDomainClique:
    """An empty registry of clique ``clique_id`` in ``namespace`` (no CD label, no owners)."""
    return ComputeDomainClique.from_dict(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.CLIQUE_KIND,
            "metadata": {
                "name": sharedimex.registry_name(clique_id),
                "namespace": namespace,
                "labels": sharedimex.registry_labels(clique_id),
            },
        }
    )


def _labelled(registry: ComputeDomainClique, clique_id: str) -> ComputeDomainClique:
    """``registry`` with the registry labels (made by another writer without them)."""
    have = dict(registry.metadata.labels or {})
    wanted = {**have, **sharedimex.registry_labels(clique_id)}
    if wanted == have:
        return registry
    body: dict[str, Any] = registry.to_dict()
    body["metadata"] = {**body["metadata"], "labels": wanted}
    return ComputeDomainClique.from_dict(body)


def valid_position(
    registry: ComputeDomainClique, position: int, max_nodes: int | None = None
) -> bool:
    """Whether the entry at ``position`` holds its index: in range, and no earlier entry of the
    list claims the same one."""
    index = registry.daemons[position].index
    if index < 0 or (max_nodes is not None and index >= max_nodes):
        return False
    return all(d.index != index for d in registry.daemons[:position])


def registered(
    registry: ComputeDomainClique | None, node: str, ip: str, max_nodes: int | None = None
) -> CliqueDaemon | None:
    """Our entry when ``registry`` lists ``node`` with address ``ip`` at a valid position."""
    if registry is None:
        return None
    position = _position(registry, node)
    if position is None or not valid_position(registry, position, max_nodes):
        return None
    mine = registry.daemons[position]
    return mine if mine.ip_address == ip else None


def without_void(registry: ComputeDomainClique, max_nodes: int) -> ComputeDomainClique:
    """``registry`` less its void entries (what its readers map)."""
    kept = (d for k, d in enumerate(registry.daemons) if valid_position(registry, k, max_nodes))
    return dataclasses.replace(registry, daemons=tuple(kept))


def is_registered(registry: ComputeDomainClique | None, node: str, ip: str) -> bool:
    """Whether ``registry`` lists ``node`` with address ``ip`` at an index that is its own."""
    return registered(registry, node, ip) is not None


def _position(registry: ComputeDomainClique, node: str) -> int | None:
    return next((k for k, d in enumerate(registry.daemons) if d.node_name == node), None)


def _claim(
    base: ComputeDomainClique, node: str, ip: str, max_nodes: int, index: int | None
) -> ComputeDomainClique:
    """``base`` with our entry registered: a valid entry keeps its index (a new IP is taken
    over). A new or void one takes the index our running IMEX uses, else the one we last held
    (``lastIndices``), when free; else the free indices go, lowest first, to the void entries in
    list order and then to us: the losers of one race, each planning from the same list, claim
    distinct indices (not all the lowest free one again), and the indices stay 0, 1, 2, …"""
    position = _position(base, node)
    if position is not None and valid_position(base, position):
        return base.with_registered(node, ip, max_nodes)
    others = tuple(d for d in base.daemons if d.node_name != node)
    taken = {d.index for d in others}
    free = [i for i in range(max_nodes) if i not in taken]
    if not free:
        raise CliqueFullError(
            f"clique {base.name}: no available indices (all {max_nodes} taken) for node {node}"
        )
    before = base.remembered_indices().get(node)
    pick = next((i for i in (index, before) if i in free), None)
    if pick is None:
        void = [
            k for k in range(len(base.daemons)) if k != position and not valid_position(base, k)
        ]
        rank = sum(1 for k in void if position is None or k < position)
        # More losers than free indices (a nearly full clique): some lose again, and then
        # find the clique full.
        pick = free[rank % len(free)]
    entry = CliqueDaemon(node_name=node, ip_address=ip, clique_id=base.clique_id, index=pick)
    # Appended at the end, as the server will: the list's order is the claims' order.
    claimed = dataclasses.replace(base, daemons=(*others, entry))
    memory = {**claimed.remembered_indices(), node: pick}
    return claimed.with_annotation(
        names.LAST_INDICES_ANNOTATION, json.dumps(memory, sort_keys=True)
    )


def plan(
    current: ComputeDomainClique | None,
    *,
    node: str,
    ip: str,
    clique_id: str,
    namespace: str,
    max_nodes: int,
    status: Readiness,
    index: int | None = None,
    lost: Mapping[int, str] | None = None,
    blocked: sharedimex.Blocked | None = None,
) -> ComputeDomainClique | None:
    """The registry with our entry registered and reporting ``status``; None: as stored.

    ``index``: the index our running IMEX uses (None before it first registered); ``lost``: the
    peers our IMEX lost (index → since, ``peerwatch``); ``blocked``: why our IMEX cannot start
    (None: it can, or we do not know of a reason).

    Raises:
        CliqueFullError: our node is new (or lost the race for its index) and every index in
            ``[0, max_nodes)`` is taken.
    """
    base = _labelled(new_registry(clique_id, namespace) if current is None else current, clique_id)
    memory = base.remembered_indices()
    if index is not None and base.daemon(node) is None and memory.get(node) != index:
        memory[node] = index
        base = base.with_annotation(
            names.LAST_INDICES_ANNOTATION, json.dumps(memory, sort_keys=True)
        )
    wanted = _claim(base, node, ip, max_nodes, index).with_status(node, status)
    wanted = with_reports(wanted, node=node, ip=ip, lost=lost or {}, blocked=blocked)
    if current is not None and _unmemoried(wanted) == _unmemoried(current):
        return None  # the memory alone is never rewritten (``registrypatch``)
    return wanted


def _unmemoried(registry: ComputeDomainClique) -> dict[str, Any]:
    return registry.with_annotation(names.LAST_INDICES_ANNOTATION, None).to_dict()


def with_reports(
    registry: ComputeDomainClique,
    *,
    node: str,
    ip: str,
    lost: Mapping[int, str],
    blocked: sharedimex.Blocked | None,
) -> ComputeDomainClique:
    """``registry`` with our lost-peers and blocked notes as given (unchanged when we are not
    listed with ``ip``: a note is only ever written under our own entry's index)."""
    mine = registered(registry, node, ip)
    if mine is None:
        return registry
    note = cliqueentry.lost_peers_of(registry, node, ip, lost)
    if note is not None:
        registry = registry.with_annotation(*note)
    key = sharedimex.blocked_key(mine.index)
    value = None if blocked is None else sharedimex.blocked_value(node, ip, blocked)
    if (registry.metadata.annotations or {}).get(key) != value:
        registry = registry.with_annotation(key, value)
    return registry


def plan_stopped(
    current: ComputeDomainClique | None, *, node: str, ip: str
) -> ComputeDomainClique | None:
    """The registry with our entry NotReady (kept with its index); None when there is nothing
    to write: no registry, no entry, already NotReady, or the entry names another IP (a newer
    agent pod on our node took it over)."""
    if current is None or not is_registered(current, node, ip):
        return None
    mine = current.daemon(node)
    if mine is None or mine.status is Readiness.NOT_READY:
        return None
    return current.with_status(node, Readiness.NOT_READY)
