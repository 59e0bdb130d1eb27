"""Our daemon entry in the ComputeDomainClique and the peers it implies (pure rules).

``membership`` applies these to the clique it follows and writes the result:
* :func:`desired`: the clique with our entry registered (index kept, or the lowest free one),
  our IP and readiness set, our pod (and our DaemonSet) an owner.
* :func:`deregistered`: the clique without our entry, matched by node *and* pod IP, so a
  terminating predecessor never removes the entry its replacement already took over.
* :func:`peer_mapping`: index → IP of the clique's entries that ``nodes.cfg`` can name.
* :func:`status_patch`: when only our entry's status is to change (the Ready report), the JSON
  patch that changes just that, guarded by ``test`` operations on our entry's node name and IP
  at its position: it needs no resourceVersion, so the other daemons' concurrent writes never
  make it conflict, and it fails (the caller falls back to a full update) if our entry moved.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon.config import Identity

PeerMapping = Mapping[int, str]
"""Clique index → pod IP of the daemons of our clique (ours included)."""


def desired(
    clique: ComputeDomainClique,
    ident: Identity,
    max_nodes: int,
    status: Readiness,
    co_owner: Mapping[str, str] | None = None,
) -> ComputeDomainClique:
    """``clique`` with our entry registered, its IP and status set, our pod an owner and
    ``co_owner`` (our DaemonSet) one too when given; pure.

    An entry of our node whose index is outside ``[0, max_nodes)`` (the maximum was lowered) is
    dropped and registered afresh, rather than crash-looping on a name nodes.cfg lacks.

    Raises:
        CliqueFullError: our node has no entry and every index is taken.
    """
    mine = clique.daemon(ident.node_name)
    if mine is not None and not 0 <= mine.index < max_nodes:
        others = [d.node_name for d in clique.daemons if d.node_name != ident.node_name]
        clique = clique.retaining_nodes(others)
    registered = clique.with_registered(ident.node_name, ident.pod_ip, max_nodes)
    want = registered.with_status(ident.node_name, status).with_owner(ident.pod_name, ident.pod_uid)
    return want if co_owner is None else want.with_owner_ref(co_owner)


def deregistered(clique: ComputeDomainClique, ident: Identity) -> ComputeDomainClique | None:
    """``clique`` without our entry, or None when it holds no entry of ours (node and IP); pure."""
    mine = clique.daemon(ident.node_name)
    if mine is None or mine.ip_address != ident.pod_ip:
        return None
    return clique.retaining_nodes(
        [d.node_name for d in clique.daemons if d.node_name != ident.node_name]
    )


def is_registered(clique: ComputeDomainClique | None, ident: Identity) -> bool:
    """Whether ``clique`` holds our entry with our current IP."""
    mine = clique.daemon(ident.node_name) if clique is not None else None
    return mine is not None and mine.ip_address == ident.pod_ip


def peer_mapping(
    clique: ComputeDomainClique, clique_id: str, max_nodes: int
) -> tuple[dict[int, str], list[str]]:
    """Index → IP of the entries of clique ``clique_id``, and why any entry was skipped; pure."""
    mapping: dict[int, str] = {}
    problems: list[str] = []
    for d in sorted(clique.daemons, key=lambda d: (d.index, d.node_name)):
        if d.clique_id != clique_id:
            problems.append(f"node {d.node_name}: clique ID {d.clique_id!r} is not ours")
        elif not 0 <= d.index < max_nodes:
            problems.append(f"node {d.node_name}: index {d.index} outside 0..{max_nodes - 1}")
        elif d.index in mapping:
            problems.append(f"node {d.node_name}: index {d.index} is taken twice")
        else:
            try:
                ipaddress.ip_address(d.ip_address)
            except ValueError:
                problems.append(f"node {d.node_name}: invalid IP {d.ip_address!r}")
                continue
            mapping[d.index] = d.ip_address
    return mapping, problems


def status_patch(
    clique: ComputeDomainClique,
    ident: Identity,
    max_nodes: int,
    status: Readiness,
    co_owner: Mapping[str, str] | None = None,
) -> list[dict[str, Any]] | None:
    """JSON patch operations that set our entry's ``status`` and nothing else, or None when
    more than that is to change (not registered, another IP, an owner missing); pure."""
    position = next(
        (k for k, d in enumerate(clique.daemons) if d.node_name == ident.node_name), None
    )
    if position is None:
        return None
    mine = clique.daemons[position]
    if mine.ip_address != ident.pod_ip or mine.status is status:
        return None
    if desired(clique, ident, max_nodes, mine.status, co_owner).to_dict() != clique.to_dict():
        return None
    entry = f"/daemons/{position}"
    return [
        {"op": "test", "path": f"{entry}/nodeName", "value": ident.node_name},
        {"op": "test", "path": f"{entry}/ipAddress", "value": ident.pod_ip},
        {"op": "add", "path": f"{entry}/status", "value": status.value},
    ]
