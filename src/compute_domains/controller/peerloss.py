"""Members whose IMEX peers lost them: the daemons' lost-peers reports, read and judged (pure).

Each daemon writes, only when it changes, which peers of its clique its IMEX has lost the links
to for longer than its bound (``daemon/peerwatch.py``; the annotation
``names.LOST_PEERS_ANNOTATION_PREFIX`` + its index on the clique). A report counts only while
its writer is the clique's entry at that index with that node and IP (a stale report of a
replaced or pruned daemon is ignored), and only for peers of the same clique.

Who is judged unreachable (docs/status.md, ``PeerUnreachable``), per clique:

* a *voter* is a reporter whose own entry is Ready: its daemon says Ready, its pod is Ready and
  its Node is Ready. A daemon that is itself down, or whose node Kubernetes already lost, does
  not count (a broken reporter must not take the others down with it);
* member ``m`` is *suspect* when a strict majority of the voters other than ``m`` report it lost;
* ``m`` is unreachable when it is suspect, or when a voter that is not suspect reports it.

So a dead node (it reports nothing, its peers report it) is unreachable as soon as one live peer
says so, however many others died with it; a node whose own network broke (it reports every
peer, every peer reports it) is unreachable, and its reports of the others do not count, since
it is suspect itself. With two members that lost each other, both are: nobody can tell which
side is broken, and the IMEX domain is broken either way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique

Reports = dict[str, dict[str, str]]
"""Reporter node → {lost peer node: since (RFC 3339)}."""


def reports(clique: ComputeDomainClique) -> Reports:
    """The valid lost-peers reports of one clique's daemons."""
    by_index = {d.index: d for d in clique.daemons}
    members = {d.node_name for d in clique.daemons}
    out: Reports = {}
    for key, raw in (clique.metadata.annotations or {}).items():
        if not key.startswith(names.LOST_PEERS_ANNOTATION_PREFIX):
            continue
        try:
            index = int(key[len(names.LOST_PEERS_ANNOTATION_PREFIX) :])
            data = json.loads(raw)
        except ValueError:
            continue
        entry = by_index.get(index)
        if not isinstance(data, dict) or entry is None:
            continue
        if data.get("node") != entry.node_name or data.get("ip") != entry.ip_address:
            continue  # a report of an earlier daemon at that index
        lost = data.get("lost")
        if not isinstance(lost, dict):
            continue
        out[entry.node_name] = {
            str(node): str(since)
            for node, since in lost.items()
            if node in members and node != entry.node_name
        }
    return out


def judge(found: Reports, members: Iterable[str], ready: Mapping[str, bool]) -> Reports:
    """Unreachable member → {reporter whose report counts: since}, for one clique (see the
    module docstring); ``ready`` is each member's entry readiness without this judgement."""
    members = sorted(set(members))
    voters = {r for r in found if ready.get(r, False)}
    voters |= {m for m in members if ready.get(m, False)}  # a Ready member that reports nothing

    def votes(m: str) -> dict[str, str]:
        return {r: found[r][m] for r in sorted(found) if r in voters and r != m and m in found[r]}

    suspect = {m for m in members if 2 * len(votes(m)) > len(voters - {m})}
    out: Reports = {}
    for m in members:
        counted = (
            votes(m)
            if m in suspect
            else {r: since for r, since in votes(m).items() if r not in suspect}
        )
        if counted:
            out[m] = counted
    return out
