"""Our daemon entry in the ComputeDomainClique and the peers it implies (pure rules).

The controller writes the entries (index, node, IP; ``controller/cliqueindex.py``); a daemon
asks for one by labelling its pod with its clique ID and then only reads them, except for its
own entry's readiness and its removal at shutdown. ``membership`` applies these rules to the
clique it follows; ``cliquewrites`` sends the patches:

* :func:`is_registered`: the clique holds our entry with our pod IP (the controller added it,
  or took over our node's entry for us).
* :func:`is_left_out`: the clique is full without us (every index taken, none ours).
* :func:`peer_mapping`: index → IP of the clique's entries that ``nodes.cfg`` can name.
* :func:`status_patch`: the JSON patch that sets our entry's ``status`` and nothing else,
  guarded by ``test`` operations on our entry's node name and IP at its position: it needs no
  resourceVersion, so no other writer's change makes it conflict, and it fails (422; the
  caller re-reads) if our entry moved or was taken over by a replacement pod.
* :func:`removal_patch`: the same guard, removing our entry: matched by node *and* pod IP, so a
  terminating predecessor never removes the entry its replacement already took over.
* :func:`lost_peers_note`: the annotation (``names.LOST_PEERS_ANNOTATION_PREFIX`` + our index)
  that says which peers our IMEX lost (``peerwatch``), when it differs from the stored one.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping
from typing import Any

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon.config import Identity

PeerMapping = Mapping[int, str]
"""Clique index → pod IP of the daemons of our clique (ours included)."""


def is_registered(clique: ComputeDomainClique | None, ident: Identity) -> bool:
    """Whether ``clique`` holds our entry with our current IP."""
    mine = clique.daemon(ident.node_name) if clique is not None else None
    return mine is not None and mine.ip_address == ident.pod_ip


def is_left_out(clique: ComputeDomainClique | None, ident: Identity, max_nodes: int) -> bool:
    """Whether ``clique`` has no slot for us: our node is not listed and ``max_nodes`` are."""
    if clique is None or clique.daemon(ident.node_name) is not None:
        return False
    return len({d.index for d in clique.daemons if 0 <= d.index < max_nodes}) >= max_nodes


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


def _guard(clique: ComputeDomainClique, ident: Identity) -> tuple[str, list[dict[str, Any]]] | None:
    """Our entry's path and the tests that it is still ours there, or None (not ours)."""
    position = next(
        (k for k, d in enumerate(clique.daemons) if d.node_name == ident.node_name), None
    )
    if position is None or clique.daemons[position].ip_address != ident.pod_ip:
        return None
    entry = f"/daemons/{position}"
    return entry, [
        {"op": "test", "path": f"{entry}/nodeName", "value": ident.node_name},
        {"op": "test", "path": f"{entry}/ipAddress", "value": ident.pod_ip},
    ]


def status_patch(
    clique: ComputeDomainClique, ident: Identity, status: Readiness
) -> list[dict[str, Any]] | None:
    """JSON patch operations that set our entry's ``status`` and nothing else, or None when
    there is nothing to write (not registered with our IP, or the status is already so)."""
    guard = _guard(clique, ident)
    mine = clique.daemon(ident.node_name)
    if guard is None or mine is None or mine.status is status:
        return None
    entry, tests = guard
    return [*tests, {"op": "add", "path": f"{entry}/status", "value": status.value}]


def removal_patch(clique: ComputeDomainClique, ident: Identity) -> list[dict[str, Any]] | None:
    """JSON patch operations that remove our entry (node and IP ours), or None (not listed)."""
    guard = _guard(clique, ident)
    if guard is None:
        return None
    entry, tests = guard
    return [*tests, {"op": "remove", "path": entry}]


def lost_peers_note(
    clique: ComputeDomainClique, ident: Identity, lost: Mapping[int, str]
) -> tuple[str, str | None] | None:
    """``(key, value)`` of our lost-peers annotation when it must be written (value None:
    removed), or None when it is as stored or we are not registered with our IP.

    ``lost`` maps a peer's index to since when; indices no entry of the clique holds are left
    out. The value is JSON ``{"node", "ip", "lost": {peer node: since}}``, keys sorted, so the
    same report always reads the same and is never written twice.
    """
    return lost_peers_of(clique, ident.node_name, ident.pod_ip, lost)


def lost_peers_of(
    clique: ComputeDomainClique, node: str, ip: str, lost: Mapping[int, str]
) -> tuple[str, str | None] | None:
    """:func:`lost_peers_note` of the writer ``node`` with pod IP ``ip`` (a resident agent's
    shared IMEX writes the same note on its clique's registry)."""
    mine = clique.daemon(node)
    if mine is None or mine.ip_address != ip:
        return None
    key = f"{names.LOST_PEERS_ANNOTATION_PREFIX}{mine.index}"
    by_index = {d.index: d.node_name for d in clique.daemons if d.node_name != node}
    named = {by_index[i]: since for i, since in lost.items() if i in by_index}
    value = json.dumps({"node": node, "ip": ip, "lost": named}, sort_keys=True) if named else None
    if (clique.metadata.annotations or {}).get(key) == value:
        return None
    return key, value
