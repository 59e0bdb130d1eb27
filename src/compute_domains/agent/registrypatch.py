"""How a resident agent's planned registry becomes writes that other agents never conflict with
(pure; issue 28: 18 agents of a clique raced one preconditioned replace, O(n²) 409s).

``registry.plan`` says what the whole ``shared-imex.<clique>`` should be after our write; it
only ever changes our own entry, the metadata labels, and annotations. From the stored object
and the plan, :func:`entry_ops` and :func:`meta_patch` derive writes without a resourceVersion,
so the API server applies them to the object as it is then (a concurrent writer of another
entry, a channel annotation or a label never makes them fail):

* our entry kept at its index: a JSON patch that ``test``\\s our node name and index at its
  position, then sets its ``ipAddress`` and ``status`` (a failed test, 422, means the list
  moved under us: re-read, plan again);
* a new entry: ``add`` to the end of the list (``/daemons/-``). Concurrent appends are
  serialised by the API server, so **the list order is the order the claims were made**, and
  ``registry.valid_position`` lets the earliest claim of an index win: an entry whose index
  an earlier entry holds is void, read by nobody, and never Ready;
* the first entry of a registry made without one (by the plugin, for a channel): a replace with
  the resourceVersion read, as before (a JSON patch cannot add a list only where none is);
* our void entry (we lost the tie): ``test`` it at its position, ``remove`` it and ``add`` the
  re-planned one to the end, in one patch;
* labels and annotations that changed: a JSON merge patch of those keys only. Every key the
  agent writes is its own (our index's reports) or idempotent (the registry labels); the
  ``lastIndices`` memory is written only when the registry is created: one JSON value shared by
  every node cannot be rewritten without a precondition, and the shared registry never removes
  an entry, so the entries themselves are the memory.
"""

from __future__ import annotations

from typing import Any

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique


def entry_ops(
    current: ComputeDomainClique, wanted: ComputeDomainClique, node: str
) -> list[dict[str, Any]]:
    """JSON patch operations that make our entry in ``current`` as in ``wanted`` ([]: it is).

    Raises:
        ValueError: ``wanted`` changes another node's entry (``registry.plan`` never does), or
            ``current`` has no entry yet (``/daemons/-`` needs a list; the first entry is
            written by a replace with the resourceVersion read instead).
    """
    theirs = [d for d in current.daemons if d.node_name != node]
    if [d for d in wanted.daemons if d.node_name != node] != theirs:
        raise ValueError(f"the plan of node {node} changes other nodes' entries")
    want = wanted.daemon(node)
    if want is None:
        return []
    position = next((k for k, d in enumerate(current.daemons) if d.node_name == node), None)
    mine = None if position is None else current.daemons[position]
    at = f"/daemons/{position}"
    if mine is not None and mine.index == want.index:
        ops: list[dict[str, Any]] = []
        if mine.ip_address != want.ip_address:
            ops.append({"op": "replace", "path": f"{at}/ipAddress", "value": want.ip_address})
        if mine.status is not want.status:
            ops.append({"op": "add", "path": f"{at}/status", "value": want.status.value})
        return [*_guard(at, node, mine.index), *ops] if ops else []
    append = {"op": "add", "path": "/daemons/-", "value": want.to_dict()}
    if mine is None:
        if not current.daemons:
            raise ValueError("the registry has no entries yet: the first one is a replace")
        return [append]
    return [
        *_guard(at, node, mine.index),
        {"op": "test", "path": f"{at}/ipAddress", "value": mine.ip_address},
        {"op": "remove", "path": at},
        append,
    ]


def _guard(at: str, node: str, index: int) -> list[dict[str, Any]]:
    return [
        {"op": "test", "path": f"{at}/nodeName", "value": node},
        {"op": "test", "path": f"{at}/index", "value": index},
    ]


def meta_patch(current: ComputeDomainClique, wanted: ComputeDomainClique) -> dict[str, Any]:
    """JSON merge patch of the labels and annotations that differ ({}: none), the
    ``lastIndices`` memory left out."""
    meta: dict[str, Any] = {}
    for field, have, want in (
        ("labels", current.metadata.labels, wanted.metadata.labels),
        ("annotations", current.metadata.annotations, wanted.metadata.annotations),
    ):
        have, want = dict(have or {}), dict(want or {})
        changed: dict[str, str | None] = {
            k: v for k, v in want.items() if have.get(k) != v and k != names.LAST_INDICES_ANNOTATION
        }
        changed.update({k: None for k in have if k not in want})
        if changed:
            meta[field] = changed
    return {"metadata": meta} if meta else {}
