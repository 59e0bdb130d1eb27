"""Which daemon gets which clique index, and the JSON patch that writes it (pure rules).

The controller is the only writer of the clique's *entries* (docs/decisions/0009): a daemon
asks for a slot by labelling its pod with its clique ID (which it does anyway), and the
controller, seeing the pod's label, node and IP in its cache, adds the daemon's entry with its
index. The daemon then only ever patches its own entry's ``status`` (unless its pod declares the
IMEX readiness signal: then the controller writes it, below) and removes its own entry at
shutdown (``daemon/cliqueentry.py``). Rules:

* A *candidate* is a daemon pod of the CD with a non-empty clique ID label, a node, a pod IP,
  not terminating and not finished (:func:`candidates`); one per node (the newest wins).
* :func:`assigned`: a candidate whose node has an entry keeps the entry's index; a different IP
  (a replacement pod) replaces the entry's IP and resets its status to NotReady (the Ready
  belonged to the pod before). A node without an entry gets the index it last held in this
  clique when that is free (``lastIndices``), else the lowest free one in ``[0, max_nodes)``;
  remembered nodes are placed first, then the others by node name, so the outcome never
  depends on arrival order within one pass. An entry whose index is outside ``[0, max_nodes)``
  (the maximum was lowered) is registered afresh. No index free: the node is reported full.
* A candidate whose pod declares the IMEX readiness signal (a resident agent's,
  ``api.imexsignal``) has its entry's ``status`` written here too, as the signal says
  (:attr:`Candidate.signal`): its daemon writes only the signal, on its own pod, so the entries
  of a clique's signalling nodes turn Ready in one patch, not in 18 contending ones
  (docs/decisions/0025). Other entries' status is their daemon's, and left alone.
* Every candidate with an entry has its pod in ``ownerReferences`` (plain references), and the
  clique's DaemonSet too when known, so the garbage collector keeps the clique while either
  lives (as before, when each daemon added itself).
* :func:`patch_ops`: the change as JSON-patch operations without a resourceVersion: a ``test``
  of ``indexRevision`` (counted up by every write here), ``test`` of node name and index of each
  entry it edits in place, edits in place, appends at the end. The daemons' status patches and
  removals never touch what it tests, so they never make it fail; a removal that shifted an
  edited entry does (422), and the controller re-reads and plans again.
* :func:`removal_ops`: entries of daemons that are gone, removed by position with a ``test`` of
  node name and IP, last position first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from compute_domains.api import imexsignal, names
from compute_domains.api.clique import CliqueDaemon, CliqueFullError, ComputeDomainClique
from compute_domains.api.computedomain import Readiness


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    """A daemon pod that asks for a slot in its clique."""

    pod_name: str
    pod_uid: str
    node_name: str
    ip: str
    clique_id: str
    created: str = ""
    """``creationTimestamp`` (RFC 3339, sorts as text): the newest pod of a node wins."""
    signal: Readiness | None = None
    """The entry's status as the pod's IMEX readiness signal says (``api.imexsignal.judge``),
    for a pod that declares the signal (a resident agent's); None: the pod's daemon writes its
    entry's status itself, and it is left alone."""
    why: str = ""
    """Why the signal does not count (``imexsignal.judge``'s words; "" when it does)."""

    @property
    def owner(self) -> dict[str, str]:
        """This pod as a plain owner reference."""
        return {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "uid": self.pod_uid}


def candidate(pod: Any) -> Candidate | None:
    """The candidate a lightkube Pod stands for, or None when it asks for no slot (yet)."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    clique_id = (meta.labels or {}).get(names.CLIQUE_ID_LABEL)
    node = spec.nodeName if spec is not None else None
    ip = status.podIP if status is not None else None
    phase = status.phase if status is not None else None
    if not clique_id or not node or not ip or meta.deletionTimestamp is not None:
        return None
    if phase in ("Succeeded", "Failed"):
        return None
    created = meta.creationTimestamp
    signal: Readiness | None = None
    why = ""
    if imexsignal.declares(meta.annotations):
        verdict = imexsignal.judge(
            pod,
            domain_uid=(meta.labels or {}).get(names.COMPUTE_DOMAIN_LABEL, ""),
            node=node,
            namespace=meta.namespace or "",
        )
        signal = Readiness.NOT_READY if verdict else Readiness.READY
        why = verdict
    return Candidate(
        pod_name=meta.name or "",
        pod_uid=meta.uid or "",
        node_name=node,
        ip=ip,
        clique_id=clique_id,
        created=created.isoformat() if hasattr(created, "isoformat") else str(created or ""),
        signal=signal,
        why=why,
    )


def candidates(pods: Iterable[Any]) -> dict[str, list[Candidate]]:
    """Clique ID → its candidates, one per node (the newest pod of a node)."""
    newest: dict[str, Candidate] = {}
    for pod in pods:
        found = candidate(pod)
        if found is None:
            continue
        seen = newest.get(found.node_name)
        if seen is None or (found.created, found.pod_name) > (seen.created, seen.pod_name):
            newest[found.node_name] = found
    out: dict[str, list[Candidate]] = {}
    for c in sorted(newest.values(), key=lambda c: c.node_name):
        out.setdefault(c.clique_id, []).append(c)
    return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Assignment:
    """The clique as it should be, and the nodes that found no free slot."""

    clique: ComputeDomainClique
    full: tuple[str, ...] = ()


def assigned(
    clique: ComputeDomainClique,
    members: Sequence[Candidate],
    max_nodes: int,
    co_owner: Mapping[str, str] | None = None,
) -> Assignment:
    """``clique`` with an entry of every candidate (see the module docstring); pure."""
    out = clique
    out_of_range = [
        m.node_name
        for m in members
        if (d := out.daemon(m.node_name)) is not None and not 0 <= d.index < max_nodes
    ]
    if out_of_range:
        out = out.retaining_nodes(
            [d.node_name for d in out.daemons if d.node_name not in out_of_range]
        )
    memory = out.remembered_indices()
    order = sorted(
        members,
        key=lambda m: (out.daemon(m.node_name) is None, m.node_name not in memory, m.node_name),
    )
    full: list[str] = []
    for m in order:
        existing = out.daemon(m.node_name)
        try:
            out = out.with_registered(m.node_name, m.ip, max_nodes)
        except CliqueFullError:
            full.append(m.node_name)
            continue
        if existing is not None and existing.ip_address != m.ip:
            out = out.with_status(m.node_name, Readiness.NOT_READY)
        if m.signal is not None:
            out = out.with_status(m.node_name, m.signal)
        out = out.with_owner(m.pod_name, m.pod_uid)
    if co_owner is not None and out.daemons:
        out = out.with_owner_ref(co_owner)
    return Assignment(clique=out, full=tuple(sorted(full)))


def revision(clique: ComputeDomainClique) -> int | None:
    """The clique's ``indexRevision`` (None when absent or unreadable)."""
    raw = (clique.metadata.annotations or {}).get(names.INDEX_REVISION_ANNOTATION)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _annotation_ops(
    current: ComputeDomainClique, desired: ComputeDomainClique
) -> list[dict[str, Any]]:
    before = dict(current.metadata.annotations or {})
    after = dict(desired.metadata.annotations or {})
    after[names.INDEX_REVISION_ANNOTATION] = str((revision(current) or 0) + 1)
    if not before:
        return [{"op": "add", "path": "/metadata/annotations", "value": after}]
    return [
        {"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v}
        for k, v in sorted(after.items())
        if before.get(k) != v
    ]


def _owner_ops(current: ComputeDomainClique, desired: ComputeDomainClique) -> list[dict[str, Any]]:
    before = [r.to_dict() for r in current.metadata.ownerReferences or []]
    after = [r.to_dict() for r in desired.metadata.ownerReferences or []]
    uids = {r.get("uid") for r in before}
    new = [r for r in after if r.get("uid") not in uids]
    if not new:
        return []
    if not before:
        return [{"op": "add", "path": "/metadata/ownerReferences", "value": new}]
    return [{"op": "add", "path": "/metadata/ownerReferences/-", "value": r} for r in new]


def patch_ops(current: ComputeDomainClique, desired: ComputeDomainClique) -> list[dict[str, Any]]:
    """JSON-patch operations that turn ``current`` into ``desired`` ([] when equal), for an
    ``assigned`` result: entries edited in place or appended, never removed or reordered."""
    if desired.to_dict() == current.to_dict():
        return []
    ops: list[dict[str, Any]] = []
    rev = revision(current)
    if rev is not None:
        ops.append(
            {
                "op": "test",
                "path": f"/metadata/annotations/{_escape(names.INDEX_REVISION_ANNOTATION)}",
                "value": str(rev),
            }
        )
    wanted = {d.node_name: d for d in desired.daemons}
    kept = [d for d in current.daemons if d.node_name in wanted]
    if len(kept) != len(current.daemons):
        # Entries went away (a lowered maximum): rewrite the whole list under the revision test.
        ops.append(
            {"op": "add", "path": "/daemons", "value": [d.to_dict() for d in desired.daemons]}
        )
    else:
        for position, entry in enumerate(current.daemons):
            want = wanted[entry.node_name]
            if want == entry:
                continue
            at = f"/daemons/{position}"
            ops += [
                {"op": "test", "path": f"{at}/nodeName", "value": entry.node_name},
                {"op": "test", "path": f"{at}/index", "value": entry.index},
                {"op": "replace", "path": at, "value": want.to_dict()},
            ]
        listed = {d.node_name for d in current.daemons}
        new = [d.to_dict() for d in desired.daemons if d.node_name not in listed]
        if new and not current.daemons:
            ops.append({"op": "add", "path": "/daemons", "value": new})
        else:
            ops += [{"op": "add", "path": "/daemons/-", "value": d} for d in new]
    return ops + _annotation_ops(current, desired) + _owner_ops(current, desired)


def removal_ops(clique: ComputeDomainClique, gone: Iterable[str]) -> list[dict[str, Any]]:
    """JSON-patch operations removing the entries of nodes ``gone``, each guarded by a ``test``
    of its node name and IP at its position ([] when none is listed)."""
    drop = set(gone)
    ops: list[dict[str, Any]] = []
    for position in reversed(range(len(clique.daemons))):
        entry: CliqueDaemon = clique.daemons[position]
        if entry.node_name not in drop:
            continue
        at = f"/daemons/{position}"
        ops += [
            {"op": "test", "path": f"{at}/nodeName", "value": entry.node_name},
            {"op": "test", "path": f"{at}/ipAddress", "value": entry.ip_address},
            {"op": "remove", "path": at},
        ]
    return ops


def for_creation(desired: ComputeDomainClique) -> ComputeDomainClique:
    """``desired`` as the controller creates it: ``indexRevision`` 1 (its first write)."""
    return desired.with_annotation(names.INDEX_REVISION_ANNOTATION, "1")
