"""The node's holder and isolation scope, derived from the checkpoint and the Node's labels (pure).

A node serves channel claims in one of two scopes at a time (issue 26, ``api.sharedimex``):

- **perDomain** (NVIDIA's model): the node serves at most one ComputeDomain, its *holder*: one
  IMEX daemon for that CD, the node label ``resource.nvidia.com/computeDomain=<X>``. The holder
  is the CD of the channel devices that live ``perDomain`` entries (``PrepareStarted``,
  ``PrepareCompleted`` or ``PrepareAborted``) hold; a channel claim of another CD is refused
  until the holder's last channel claim is unprepared.
- **perClique**: the node runs its clique's shared IMEX, and any number of per-clique CDs share
  it, each with its own claims and its own channel. The node is in this scope while a live
  ``perClique`` entry exists *or* the Node carries ``compute-domains/shared-imex=on`` (written by
  this plugin: at a per-clique CD's first prepare, or at start with ``shared_imex_eager``); the
  label outlives the claims, because the shared IMEX is never stopped by a detach.

What every channel slot advertises (``devices``, ``effective``): the per-domain holder's UID
while one holds the node, else ``sharedimex.SHARED_HOLDER`` while the node is in the per-clique
scope, else the CD of the node's warm-spare label (issue 16: ``compute-domains/warm-for=<X>``
holds the node for ``X`` with no claim of it here), else nothing. So a per-domain CD's template
(``!has(domain) || domain == <uid>``) never lands on a per-clique node, and a per-clique CD's
(``sharedimex.channel_selector``) never on a per-domain one.

Invariants (``check_free_for`` refuses what would break them, with the retryable
``NodeHeldError``, naming both scopes when they differ):
- A node never serves two *per-domain* CDs, and never a per-domain and a per-clique CD at once.
- Several per-clique CDs may share a node; a warm spare's reservation holds against every other
  CD until the node is in the per-clique scope (the controller never makes such a node warm).
- The live entries' holder comes before the labels: a per-domain holder's next claim still
  prepares even if a label races.
"""

from __future__ import annotations

import dataclasses

from compute_domains.api import names, sharedimex
from compute_domains.plugin import checkpoint, computedomain, devices

Scope = sharedimex.Scope


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeLabels:
    """What this plugin's Node says about its holder (``nodewatch``)."""

    warm_for: str = ""
    """The CD UID of the warm-spare label ("" when none)."""
    shared_imex: bool = False
    """Whether the Node carries ``compute-domains/shared-imex=on``."""


def claims_by_domain(
    cp: checkpoint.Checkpoint, scope: Scope, *, exclude: str = ""
) -> dict[str, set[str]]:
    """CD UID → UIDs of the live ``scope`` claims with its channel devices (``exclude`` left
    out)."""
    out: dict[str, set[str]] = {}
    for uid, entry in cp.claims.items():
        if uid == exclude or not entry.state.live or entry.scope is not scope:
            continue
        for device in entry.devices:
            if device.kind == devices.DeviceType.CHANNEL and device.domain_uid:
                out.setdefault(device.domain_uid, set()).add(uid)
    return out


def claims_by_holder(cp: checkpoint.Checkpoint, *, exclude: str = "") -> dict[str, set[str]]:
    """Per-domain holder (CD UID) → UIDs of its live channel claims (``exclude`` left out).

    More than one key means the node is wrongly held by several CDs; normally there is one.
    """
    return claims_by_domain(cp, Scope.PER_DOMAIN, exclude=exclude)


def domains_in_use(cp: checkpoint.Checkpoint, *, exclude: str = "", warm_for: str = "") -> set[str]:
    """UIDs of the CDs whose devices (channel or daemon) live entries hold (``exclude`` left
    out), and the CD the node is warm for (``warm_for``, its warm-spare label): the CDs whose
    per-CD folder this node still needs. A resident agent serves the warm CD with no claim here
    and keeps its IMEX config in that folder; taking it away leaves its IMEX unable to start
    again."""
    held = {
        device.domain_uid
        for uid, entry in cp.claims.items()
        if uid != exclude and entry.state.live
        for device in entry.devices
        if device.domain_uid
    }
    return held | {warm_for} if warm_for else held


def holder_of(cp: checkpoint.Checkpoint) -> str:
    """The UID of the per-domain CD holding the node ("" when none); the lowest UID if,
    wrongly, several."""
    holders = sorted(claims_by_holder(cp))
    return holders[0] if holders else ""


def in_shared_scope(cp: checkpoint.Checkpoint, labels: NodeLabels) -> bool:
    """Whether the node is in the per-clique scope: a live per-clique claim, or the label."""
    return labels.shared_imex or bool(claims_by_domain(cp, Scope.PER_CLIQUE))


def effective(cp: checkpoint.Checkpoint, labels: NodeLabels) -> str:
    """The holder to advertise: the per-domain holder, else ``SHARED_HOLDER`` in the per-clique
    scope, else the CD the node is warm for, else ""."""
    if held := holder_of(cp):
        return held
    if in_shared_scope(cp, labels):
        return sharedimex.SHARED_HOLDER
    return labels.warm_for


def check_free_for(
    cp: checkpoint.Checkpoint,
    *,
    node: str,
    domain_uid: str,
    claim: str,
    scope: Scope = Scope.PER_DOMAIN,
    labels: NodeLabels = NodeLabels(),  # frozen: a shared default is safe
) -> None:
    """Refuse a channel claim (UID ``claim``) of CD ``domain_uid`` in ``scope`` if the node is
    held by another per-domain CD, is in the other scope, or is a warm spare of another CD.

    Raises:
        computedomain.NodeHeldError: the node is not free for it (retryable: the holder, or
            the scope, may leave).
    """
    held = claims_by_holder(cp, exclude=claim)
    shared = claims_by_domain(cp, Scope.PER_CLIQUE, exclude=claim)
    if scope is Scope.PER_CLIQUE:
        if held:
            holder = sorted(held)[0]
            raise computedomain.NodeHeldError(
                f"node {node} is held by another ComputeDomain ({holder}, scope "
                f"{Scope.PER_DOMAIN}, claims {', '.join(sorted(held[holder]))}); ComputeDomain "
                f"{domain_uid} (scope {Scope.PER_CLIQUE}) can use it once that one leaves"
            )
        if labels.shared_imex or shared:
            return
    elif labels.shared_imex or shared:
        why = (
            f"per-clique claims {', '.join(sorted({c for cs in shared.values() for c in cs}))}"
            if shared
            else f"node label {sharedimex.SHARED_IMEX_LABEL}={sharedimex.SHARED_IMEX_ON}"
        )
        raise computedomain.NodeHeldError(
            f"node {node} is held by the {Scope.PER_CLIQUE} scope (it runs its clique's shared "
            f"IMEX: {why}); ComputeDomain {domain_uid} (scope {Scope.PER_DOMAIN}) can use it "
            f"once the node leaves that scope (label {sharedimex.SHARED_IMEX_LABEL} removed)"
        )
    warm_for = labels.warm_for
    if warm_for and warm_for != domain_uid and domain_uid not in held:
        raise computedomain.NodeHeldError(
            f"node {node} is a warm spare reserved for ComputeDomain {warm_for} (node label "
            f"{names.WARM_FOR_LABEL}={warm_for}); ComputeDomain {domain_uid} can use it once "
            "that label is gone"
        )
    others = {d for d in held if d != domain_uid}
    if others:
        holder = sorted(others)[0]
        claims = ", ".join(sorted(held[holder]))
        raise computedomain.NodeHeldError(
            f"node {node} is held by another ComputeDomain ({holder}, claims "
            f"{claims}); ComputeDomain {domain_uid} can use it once that one leaves"
        )
