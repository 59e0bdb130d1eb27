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
* :func:`is_registered`: the registry lists our node with our IP (IMEX may start: our own name
  resolves once the hosts block is written from it).

None from a plan means nothing to write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from compute_domains.api import names, sharedimex
from compute_domains.api.clique import ComputeDomainClique
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


def is_registered(registry: ComputeDomainClique | None, node: str, ip: str) -> bool:
    """Whether ``registry`` lists ``node`` with address ``ip``."""
    mine = registry.daemon(node) if registry is not None else None
    return mine is not None and mine.ip_address == ip


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
        CliqueFullError: our node is new and every index in ``[0, max_nodes)`` is taken.
    """
    base = _labelled(new_registry(clique_id, namespace) if current is None else current, clique_id)
    memory = base.remembered_indices()
    if index is not None and base.daemon(node) is None and memory.get(node) != index:
        memory[node] = index
        base = base.with_annotation(
            names.LAST_INDICES_ANNOTATION, json.dumps(memory, sort_keys=True)
        )
    wanted = base.with_registered(node, ip, max_nodes)
    wanted = wanted.with_status(node, status)
    wanted = with_reports(wanted, node=node, ip=ip, lost=lost or {}, blocked=blocked)
    if current is not None and wanted.to_dict() == current.to_dict():
        return None
    return wanted


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
    mine = registry.daemon(node)
    if mine is None or mine.ip_address != ip:
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
