"""Comparing two statuses of a ComputeDomain: whether to write, and what changed for a person.

``differs`` decides whether the stored status needs a write (list order does not matter);
``urgent`` whether that write must go out at once (a verdict changed) or may wait for the
progress interval, so a forming domain's per-node progress becomes one write per interval
instead of one per daemon; ``transitions`` names the entries that joined, left, went NotReady
or came back, which the status sync turns into Events, ``grouped`` the joins and leaves that one
Event can tell together. All are pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from compute_domains.api import names
from compute_domains.api.computedomain import ComputeDomainNode, ComputeDomainStatus, Readiness
from compute_domains.controller import notready, status


def _normalise(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    if not raw:
        return {}
    nodes = {n.get("name"): dict(n) for n in raw.get("nodes") or []}
    conds = {c.get("type"): dict(c) for c in raw.get("conditions") or []}
    rest = {k: v for k, v in raw.items() if k not in ("nodes", "conditions")}
    return {**rest, "nodes": nodes, "conditions": conds}


def differs(current: Mapping[str, Any] | None, desired: ComputeDomainStatus) -> bool:
    """Whether the stored raw status differs from ``desired`` (list order does not matter)."""
    return _normalise(current) != _normalise(desired.to_dict())


def urgent(previous: ComputeDomainStatus | None, desired: ComputeDomainStatus) -> bool:
    """Whether a write of ``desired`` over ``previous`` must not wait: the first status, the
    CD's Ready status, a condition's type, status, reason or observed generation, or a Ready
    entry turning NotReady. Everything else (an entry appearing, its IP, index or Ready, a
    condition's message) is progress, which may wait for the progress interval."""
    if previous is None or previous.status is not desired.status:
        return True

    def verdicts(st: ComputeDomainStatus) -> dict[str, tuple[str, str, int]]:
        return {c.type: (c.status, c.reason, c.observed_generation) for c in st.conditions}

    if verdicts(previous) != verdicts(desired):
        return True
    was_ready = {n.name for n in previous.nodes if n.status is Readiness.READY}
    return any(n.name in was_ready and n.status is not Readiness.READY for n in desired.nodes)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Transition:
    """A change of one node's entry worth telling a person about."""

    node: str
    kind: str
    """``joined`` (new entry), ``left`` (entry gone), ``not-ready`` (was Ready, now NotReady)
    or ``ready`` (a member that had gone NotReady is Ready again)."""
    entry: ComputeDomainNode | None
    why: str = ""
    """For ``not-ready``: what is wrong."""


def transitions(old: ComputeDomainStatus | None, new: status.Derived) -> list[Transition]:
    """Entries that joined, left, went NotReady or came back between two statuses."""
    before = {n.name: n for n in (old.nodes if old is not None else ())}
    after = {n.name: n for n in new.status.nodes}
    first = notready.by_name(old)  # what ``member`` looks up, once instead of a scan per node
    out = [Transition(node=k, kind="joined", entry=v) for k, v in after.items() if k not in before]
    out += [Transition(node=k, kind="left", entry=v) for k, v in before.items() if k not in after]
    for name, entry in after.items():
        prev = before.get(name)
        if prev is None or prev.status is entry.status:
            continue
        if entry.status is Readiness.NOT_READY:
            why = new.why.get(name)
            text = why.text if why is not None else ""
            out.append(Transition(node=name, kind="not-ready", entry=entry, why=text))
        elif notready.member(name, old, first):
            out.append(Transition(node=name, kind="ready", entry=entry))
    return sorted(out, key=lambda t: (t.node, t.kind))


def where(entry: ComputeDomainNode | None) -> str:
    """Where an entry stands, for a person: its clique and index, or that it has none yet."""
    if entry is not None and entry.index != names.NON_FABRIC_INDEX:
        return f"clique {entry.clique_id!r}, index {entry.index}"
    if entry is not None and entry.clique_id:
        return f"clique {entry.clique_id!r}, no slot yet"
    return "no clique"


def grouped(changes: list[Transition]) -> list[list[Transition]]:
    """The transitions one Event each tells: the joins that stand at the same place (``where``)
    together, the leaves together, every NotReady or Ready on its own (each has its own why)."""
    groups: dict[tuple[str, str], list[Transition]] = {}
    for change in changes:
        if change.kind == "joined":
            key = ("joined", where(change.entry))
        elif change.kind == "left":
            key = ("left", "")
        else:
            key = (change.kind, change.node)
        groups.setdefault(key, []).append(change)
    return list(groups.values())
