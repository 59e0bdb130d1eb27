"""Workload claims allocated on a node another ComputeDomain holds, and what to do (pure).

Two CDs racing for one free node can both get a channel claim allocated there: the scheduler
sees a node's holder only once the plugin has republished its ResourceSlice (``domain``
attribute, see ``plugin/devices.py``), and that happens after the first claim's prepare
began. The plugin then refuses the loser's prepare ("held by another ComputeDomain"), and the
loser's pod would wait in ``ContainerCreating`` until the holder leaves; two CDs that each won
one node would wait on each other for good. The ``replacer`` resolves this; this module decides.

A node's *holder* is the CD its ``resource.nvidia.com/computeDomain`` label names (the plugin
writes it at the first prepare, with a resourceVersion precondition, so there is exactly one),
else the CD its warm-spare label reserves it for, else ``sharedimex.SHARED_HOLDER`` while its
``compute-domains/shared-imex`` label is ``on`` (the node is in the per-clique scope: its shared
IMEX serves every per-clique CD and no per-domain one). A *conflict* is a workload claim of a CD
the holder keeps off the node (``keeps_off``: another CD, or any per-domain CD on a shared node)
allocated there and reserved for a pod; the plugin refuses its prepare with the same
``NodeHeldError`` whichever scope is in the way, and nothing here reads its message. What
happens to that pod (``decide``):

- ``REPLACE``: the pod is bound to the node, not yet running, its claim is its own (made from
  a template for this pod, so it goes with the pod) and a controller that is not a DaemonSet
  owns it. Deleting it lets the owner make a new pod, with a new claim, which the scheduler
  places where the slices allow: a free node, a node of its own CD, or nowhere (Pending, with
  the scheduler's message).
- ``WAIT``: anything else that is still waiting there: no controller (a bound pod cannot move,
  ``spec.nodeName`` is immutable, and nobody would recreate it), a DaemonSet (its new pod
  would be bound to the same node), or a claim shared with other pods or made by hand (it
  stays allocated on the node whatever becomes of this pod). It waits until the holder
  leaves, and says so.
- ``SKIP``: nothing to do: gone, replaced by a pod of another UID, terminating, not yet bound
  (looked at again once it is), or running (its claim was prepared: never touched).

Why this cannot deadlock: every node has one holder; every pod of another CD waiting on it is
either re-placed at once (it then waits nowhere) or ownerless (it waits for the holder, whose
own pods never wait on it). So no pod of a holder waits for a node held by a CD that waits for
it: the wait-for graph has no cycle when every racing pod has a controller.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from compute_domains.api import names, nodemark, sharedimex
from compute_domains.controller import claims


class Action(enum.Enum):
    """What to do with a pod whose claim is allocated on a node another CD holds."""

    REPLACE = "replace"
    WAIT = "wait"
    SKIP = "skip"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Conflict:
    """A pod of CD ``loser`` whose workload claim is allocated on ``node``, held by ``holder``."""

    node: str
    holder: str
    """UID of the CD holding the node."""
    loser: str
    """UID of the pod's CD."""
    namespace: str
    claim: str
    """Name of the claim (in ``namespace``)."""
    claim_owned: bool
    """Whether the claim was made for this pod alone (its controller owner is this pod)."""
    pod: str
    pod_uid: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """``decide``'s answer, with the reason a person reads when it is ``WAIT`` or ``SKIP``."""

    action: Action
    why: str = ""


_SHARED_WORDS = "the per-clique scope (its shared IMEX serves per-clique ComputeDomains only)"


def holder(node: Any) -> str:
    """The holder of ``node`` ("" when free): the UID in its CD label, else in its warm label,
    else ``sharedimex.SHARED_HOLDER`` when it is in the per-clique scope."""
    meta = claims._get(node, "metadata")
    labels: Mapping[str, str] = claims._get(meta, "labels") or {}
    # The CD mark in either form (``api.nodemark``); read, not copied: once per node per pass.
    found = nodemark.domain_of(meta) or str(labels.get(names.WARM_FOR_LABEL) or "")
    if not found and labels.get(sharedimex.SHARED_IMEX_LABEL) == sharedimex.SHARED_IMEX_ON:
        return sharedimex.SHARED_HOLDER
    return found


def keeps_off(node_holder: str, domain_uid: str, *, shared: bool) -> bool:
    """Whether a node's holder keeps CD ``domain_uid`` (``shared``: a per-clique CD) off it."""
    if not node_holder or node_holder == domain_uid:
        return False
    if node_holder == sharedimex.SHARED_HOLDER:
        return not shared
    return True


def holder_words(node_holder: str, cd_name: Callable[[str], str]) -> str:
    """The holder for a person: ``ComputeDomain ns/name (uid)``, or the per-clique scope."""
    if node_holder == sharedimex.SHARED_HOLDER:
        return _SHARED_WORDS
    return f"ComputeDomain {cd_name(node_holder)}"


def conflicts(
    node: str,
    node_holder: str,
    allocated: Iterable[Any],
    is_shared: Callable[[str], bool] = lambda _uid: False,
) -> list[Conflict]:
    """The pods of CDs that ``node_holder`` keeps off ``node`` whose workload claims
    (``allocated``: the ResourceClaims allocated on ``node``) are allocated there; none when the
    node is free. ``is_shared`` says whether a CD UID is a per-clique CD."""
    if not node_holder:
        return []
    out: list[Conflict] = []
    for claim in allocated:
        if claims.allocated_node(claim) != node:
            continue
        losers = [
            d for d in claims.domain_uids(claim) if keeps_off(node_holder, d, shared=is_shared(d))
        ]
        if not losers:
            continue
        meta = claims._get(claim, "metadata")
        owners = claims._get(meta, "ownerReferences") or []
        reserved = claims._get(claims._get(claim, "status"), "reservedFor") or []
        for ref in reserved:
            if claims._get(ref, "resource") != "pods" or not claims._get(ref, "name"):
                continue
            pod_uid = str(claims._get(ref, "uid") or "")
            owned = len(reserved) == 1 and any(
                claims._get(o, "kind") == "Pod"
                and claims._get(o, "uid") == pod_uid
                and claims._get(o, "controller")
                for o in owners
            )
            out.append(
                Conflict(
                    node=node,
                    holder=node_holder,
                    loser=losers[0],
                    namespace=str(claims._get(meta, "namespace") or ""),
                    claim=str(claims._get(meta, "name") or ""),
                    claim_owned=owned,
                    pod=str(claims._get(ref, "name")),
                    pod_uid=pod_uid,
                )
            )
    return out


def held_text(
    holder_name: str, waiting: Iterable[claims.WorkloadClaim], *, shared: bool = False
) -> str:
    """The words for a node of a CD's workload that CD ``holder_name`` holds (``shared``: the
    node is in the per-clique scope, which keeps a per-domain CD off it): the holder and the
    pods that wait there (the CD's status, ``status.derive``'s ``held_by``)."""
    pods = claims.using_pods(waiting)
    who = ", ".join(pods) if pods else "its claim"
    if shared:
        return f"in {_SHARED_WORDS}; {who} waiting there (a pod with a controller is re-placed)"
    return (
        f"held by ComputeDomain {holder_name}; {who} waiting there until it leaves "
        "(a pod with a controller is re-placed)"
    )


def controller_of(pod: Any) -> tuple[str, str] | None:
    """``(kind, name)`` of the pod's controller owner reference, or None."""
    for ref in claims._get(claims._get(pod, "metadata"), "ownerReferences") or []:
        if claims._get(ref, "controller"):
            return str(claims._get(ref, "kind") or ""), str(claims._get(ref, "name") or "")
    return None


def decide(conflict: Conflict, pod: Any | None) -> Decision:
    """What to do with the conflict's pod (``pod``: its fresh read, None when gone)."""
    meta = claims._get(pod, "metadata")
    if pod is None or claims._get(meta, "uid") != conflict.pod_uid:
        return Decision(action=Action.SKIP, why="pod gone or replaced already")
    if claims._get(meta, "deletionTimestamp"):
        return Decision(action=Action.SKIP, why="pod terminating")
    bound = claims._get(claims._get(pod, "spec"), "nodeName")
    if bound != conflict.node:
        return Decision(action=Action.SKIP, why=f"pod bound to {bound or 'no node yet'}")
    phase = claims._get(claims._get(pod, "status"), "phase") or "Pending"
    if phase != "Pending":
        return Decision(action=Action.SKIP, why=f"pod {phase}: its claim was prepared")
    owner = controller_of(pod)
    if owner is None:
        return Decision(
            action=Action.WAIT,
            why="it has no controller to recreate it elsewhere (a bound pod cannot move)",
        )
    kind, name = owner
    if kind == "DaemonSet":
        return Decision(
            action=Action.WAIT,
            why=f"its controller, DaemonSet {name}, would recreate it on the same node",
        )
    if not conflict.claim_owned:
        return Decision(
            action=Action.WAIT,
            why=(
                f"its claim {conflict.claim} is not its own (shared or made by hand), so it "
                "stays allocated on this node whatever becomes of the pod"
            ),
        )
    return Decision(action=Action.REPLACE)


def advertises(resource_slice: Any, node_holder: str) -> bool:
    """Whether a node's ResourceSlice (plain JSON or model) shows ``node_holder`` on a channel
    slot: only then does the scheduler keep a re-placed pod's new claim off the node."""
    spec = claims._get(resource_slice, "spec")
    for device in claims._get(spec, "devices") or []:
        attrs = claims._get(device, "attributes") or {}
        value = attrs.get(names.CHANNEL_HOLDER_ATTRIBUTE) if isinstance(attrs, dict) else None
        if claims._get(value, "string") == node_holder:
            return True
    return False
