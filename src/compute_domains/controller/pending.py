"""Pods of a ComputeDomain's job that wait for the scheduler, and who holds the nodes (pure).

A workload claim that exists but is not allocated belongs to a pod the scheduler has not placed
(yet): the job is not complete, so the CD is not Ready (docs/status.md, rule 1). Such a pod is
found through the controller's cache of unscheduled pods (``spec.nodeName`` empty, every
namespace): a pod names its claims in ``spec.resourceClaims[].resourceClaimName`` (a claim
written by hand) or ``status.resourceClaimStatuses[].resourceClaimName`` (a claim made from a
template for it, which the pod also owns). A pod that is being deleted waits for nothing.

What the status says about it is the scheduler's own word: the message of the pod's
``PodScheduled=False`` condition (``Unschedulable``: why no node fits). When the nodes it could
use are held by another ComputeDomain (a node's ``resource.nvidia.com/computeDomain`` label is
that CD's UID), :func:`holders` names that CD and the nodes it holds, which the scheduler's
message never does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

WAITING = "not tried by the scheduler yet"
"""What a pending pod's entry says before the scheduler wrote a condition."""


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def claim_keys(pod: Any) -> Iterable[str]:
    """``namespace/claim`` of every ResourceClaim ``pod`` names (an indexer)."""
    meta, spec, status = _get(pod, "metadata"), _get(pod, "spec"), _get(pod, "status")
    ns = str(_get(meta, "namespace") or "")
    found: list[str] = []
    for ref in _get(spec, "resourceClaims") or []:
        name = _get(ref, "resourceClaimName")
        if name:
            found.append(f"{ns}/{name}")
    for ref in _get(status, "resourceClaimStatuses") or []:
        name = _get(ref, "resourceClaimName")
        if name:
            found.append(f"{ns}/{name}")
    return tuple(dict.fromkeys(found))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True, order=True)
class PendingPod:
    """A pod of the job that holds an unallocated workload claim."""

    namespace: str
    name: str
    claim: str
    message: str = ""
    """The scheduler's message (``PodScheduled=False``); "" while it has not tried yet."""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def describe(self) -> str:
        """``ns/pod (claim c): the scheduler's message``, for a person."""
        why = self.message or WAITING
        return f"pod {self.key} (claim {self.claim}): {why}"


def scheduler_message(pod: Any) -> str:
    """The message of ``pod``'s ``PodScheduled=False`` condition ("" when there is none)."""
    for cond in _get(_get(pod, "status"), "conditions") or []:
        if _get(cond, "type") == "PodScheduled" and _get(cond, "status") == "False":
            return str(_get(cond, "message") or _get(cond, "reason") or "Unschedulable")
    return ""


def waiting(pod: Any, claim: str) -> PendingPod | None:
    """``pod`` as a pending pod of ``claim``, or None (placed, or being deleted)."""
    meta, spec = _get(pod, "metadata"), _get(pod, "spec")
    if pod is None or _get(meta, "deletionTimestamp") or _get(spec, "nodeName"):
        return None
    return PendingPod(
        namespace=str(_get(meta, "namespace") or ""),
        name=str(_get(meta, "name") or ""),
        claim=claim,
        message=scheduler_message(pod),
    )


def holders(
    held: Mapping[str, Sequence[str]], own_uid: str, name_of: Callable[[str], str | None]
) -> list[str]:
    """``ns/name (node, ...)`` of every other CD that holds nodes (``held``: CD UID → its
    nodes, from the nodes' CD label); a UID without a known CD is named by its UID."""
    out = []
    for uid, nodes in sorted(held.items()):
        if uid == own_uid or not nodes:
            continue
        more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
        shown = ", ".join(sorted(nodes)[:3]) + more
        out.append(f"ComputeDomain {name_of(uid) or uid} holds {shown}")
    return out
