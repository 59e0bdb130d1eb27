"""``status.conditions`` of a ComputeDomain: the standard ``metav1.Condition`` shape, our reasons.

Wire shape (Kubernetes' ``metav1.Condition``, so ``kubectl wait --for=condition=Ready`` and every
generic tool read it): ``type``, ``status`` (``True``/``False``/``Unknown``), ``reason``
(CamelCase, stable: people and scripts filter on it), ``message`` (for a person),
``lastTransitionTime`` (RFC 3339, changes only when ``status`` changes) and
``observedGeneration``. The list is a map keyed by ``type``.

Types and reasons (docs/status.md explains each and what to do about it):
- ``Ready``: True with ``AllNodesReady``; False with, in order of precedence,
  ``TemplateConflict``, ``CliqueFull``, ``NodeNotReady``, ``NoWorkload`` or ``Forming``.
  ``status.status`` is ``Ready`` exactly when this condition is True.
- ``Ready`` False with ``InvalidImexScope``, ``ImexScopeNeedsResidentAgents`` or
  ``AllocationModeAllNotIsolated`` (first of all): the controller refuses to serve the CD as
  asked and created nothing for it (docs/status.md "Isolation scope").
- ``ImexScope``: present only while the CD's ``compute-domains/imex-scope`` annotation disagrees
  with the scope fixed at creation (reason ``ScopeChangeRefused``; the fixed one is served).
- ``Deleting``: present only while a deleted ComputeDomain waits for the pods that still hold
  its workload claims (reason ``WaitingForWorkload``, the pods named in the message).

``merged`` keeps a condition's ``lastTransitionTime`` while its status stays the same, so writing
the same conditions again is not a change.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping
from typing import Any, Final, Self

from compute_domains.api import _wire

READY: Final = "Ready"
DELETING: Final = "Deleting"

TRUE: Final = "True"
FALSE: Final = "False"

# Reasons of the Ready condition.
ALL_NODES_READY: Final = "AllNodesReady"
FORMING: Final = "Forming"
NODE_NOT_READY: Final = "NodeNotReady"
CLIQUE_FULL: Final = "CliqueFull"
TEMPLATE_CONFLICT: Final = "TemplateConflict"
NO_WORKLOAD: Final = "NoWorkload"
PODS_PENDING: Final = "PodsPending"
PEER_UNREACHABLE: Final = "PeerUnreachable"
INVALID_IMEX_SCOPE: Final = "InvalidImexScope"
IMEX_SCOPE_NEEDS_RESIDENT_AGENTS: Final = "ImexScopeNeedsResidentAgents"
ALLOCATION_MODE_ALL_NOT_ISOLATED: Final = "AllocationModeAllNotIsolated"
# The ImexScope condition (only while the scope annotation was edited after creation).
IMEX_SCOPE: Final = "ImexScope"
SCOPE_CHANGE_REFUSED: Final = "ScopeChangeRefused"
# Reason of the Deleting condition.
WAITING_FOR_WORKLOAD: Final = "WaitingForWorkload"


def now() -> str:
    """The current time as a condition timestamp (RFC 3339, seconds, UTC)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Condition:
    """One ``status.conditions[]`` entry."""

    type: str
    status: str
    """``True``, ``False`` or ``Unknown``."""
    reason: str
    message: str = ""
    last_transition_time: str = ""
    """RFC 3339; set by ``merged`` when empty."""
    observed_generation: int = 0
    """``metadata.generation`` the condition was derived from."""

    @property
    def true(self) -> bool:
        """Whether ``status`` is ``True``."""
        return self.status == TRUE

    @classmethod
    def from_dict(cls, data: Mapping[str, object], path: str = "") -> Self:
        """Decode from wire form (the API server validates the required fields)."""
        return cls(
            type=_wire.req_str(data, "type", path),
            status=_wire.req_str(data, "status", path),
            reason=_wire.opt_str(data, "reason", path) or "",
            message=_wire.opt_str(data, "message", path) or "",
            last_transition_time=_wire.opt_str(data, "lastTransitionTime", path) or "",
            observed_generation=_wire.opt_int(data, "observedGeneration", path) or 0,
        )

    def to_dict(self) -> dict[str, Any]:
        """Encode to wire form (every field, always)."""
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.last_transition_time,
            "observedGeneration": self.observed_generation,
        }


def find(conditions: Iterable[Condition], kind: str) -> Condition | None:
    """The condition of type ``kind``, if any."""
    return next((c for c in conditions if c.type == kind), None)


def merged(
    previous: Iterable[Condition], desired: Iterable[Condition], *, at: str
) -> tuple[Condition, ...]:
    """``desired`` with each ``lastTransitionTime`` kept from ``previous`` where the status
    did not change, else ``at``."""
    before = {c.type: c for c in previous}
    out = []
    for cond in desired:
        old = before.get(cond.type)
        if old is not None and old.status == cond.status and old.last_transition_time:
            since = old.last_transition_time
        else:
            since = cond.last_transition_time or at
        out.append(dataclasses.replace(cond, last_transition_time=since))
    return tuple(out)


def schema() -> dict[str, Any]:
    """The CRD schema of ``status.conditions``: Kubernetes' ``metav1.Condition`` list, as every
    built-in API declares it."""
    item = {
        "type": "object",
        "properties": {
            "lastTransitionTime": dict(
                description="When the condition last changed its status.",
                type="string",
                format="date-time",
            ),
            "message": dict(
                description="What happened, for a person.", type="string", maxLength=32768
            ),
            "observedGeneration": dict(
                description="metadata.generation the condition was derived from.",
                type="integer",
                format="int64",
                minimum=0,
            ),
            "reason": dict(
                description="Why, in one CamelCase word that scripts can filter on.",
                type="string",
                maxLength=1024,
                minLength=1,
                pattern="^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
            ),
            "status": dict(
                description="True, False or Unknown.",
                type="string",
                enum=["True", "False", "Unknown"],
            ),
            "type": dict(
                description="Ready, or Deleting while a deletion waits for the workload.",
                type="string",
                maxLength=316,
                pattern=(
                    "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                    "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
                ),
            ),
        },
        "required": ["lastTransitionTime", "message", "reason", "status", "type"],
    }
    return {
        "description": "Standard conditions: Ready (with the reason when it is not), Deleting.",
        "type": "array",
        "items": item,
        "x-kubernetes-list-map-keys": ["type"],
        "x-kubernetes-list-type": "map",
    }
