"""Comparing two statuses of a ComputeDomain: whether to write, and what changed for a person.

``differs`` decides whether the stored status needs a write (list order does not matter);
``transitions`` names the entries that joined, left, went NotReady or came back, which the
status sync turns into Events. Both are pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from compute_domains.api.computedomain import ComputeDomainNode, ComputeDomainStatus, Readiness
from compute_domains.controller import status


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
        elif status.member(name, old):
            out.append(Transition(node=name, kind="ready", entry=entry))
    return sorted(out, key=lambda t: (t.node, t.kind))
