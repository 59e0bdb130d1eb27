"""The node's holder: the one ComputeDomain whose channel claims are live on it (pure).

A node serves at most one ComputeDomain at a time (one IMEX daemon, one node label). The holder
is derived from the checkpoint alone, never stored: it is the CD of the channel devices that live
entries (``PrepareStarted``, ``PrepareCompleted`` or ``PrepareAborted``) hold. The plugin labels
the node for it and advertises it on every channel slot (``devices``); a channel claim of
another CD is refused until the holder's last channel claim is unprepared.

A warm spare (issue 16): a node labelled ``compute-domains/warm-for=<X>`` by the controller is
held by CD ``X`` even with no claim of it here (``effective``), so another CD's channel claim is
neither allocated (the advertised holder) nor prepared there; the live claims' holder, if any,
still comes first (the controller never makes a held node warm, but the label may race).
"""

from __future__ import annotations

from compute_domains.api import names
from compute_domains.plugin import checkpoint, computedomain, devices


def claims_by_holder(cp: checkpoint.Checkpoint, *, exclude: str = "") -> dict[str, set[str]]:
    """Holder (CD UID) → UIDs of the live claims with its channel devices (``exclude`` left out).

    More than one key means the node is wrongly held by several CDs; normally there is one.
    """
    out: dict[str, set[str]] = {}
    for uid, entry in cp.claims.items():
        if uid == exclude or not entry.state.live:
            continue
        for device in entry.devices:
            if device.kind == devices.DeviceType.CHANNEL and device.domain_uid:
                out.setdefault(device.domain_uid, set()).add(uid)
    return out


def domains_in_use(cp: checkpoint.Checkpoint, *, exclude: str = "") -> set[str]:
    """UIDs of the CDs whose devices (channel or daemon) live entries hold (``exclude`` left
    out): the CDs whose per-CD folder this node still needs."""
    return {
        device.domain_uid
        for uid, entry in cp.claims.items()
        if uid != exclude and entry.state.live
        for device in entry.devices
        if device.domain_uid
    }


def holder_of(cp: checkpoint.Checkpoint) -> str:
    """The UID of the CD holding the node ("" when free); the lowest UID if, wrongly, several."""
    holders = sorted(claims_by_holder(cp))
    return holders[0] if holders else ""


def effective(cp: checkpoint.Checkpoint, warm_for: str) -> str:
    """The holder to advertise: the live claims' CD, else the CD the node is warm for, else ""."""
    return holder_of(cp) or warm_for


def check_free_for(
    cp: checkpoint.Checkpoint, *, node: str, domain_uid: str, claim: str, warm_for: str = ""
) -> None:
    """Refuse a channel claim (UID ``claim``) of CD ``domain_uid`` if another CD holds the node
    (``warm_for``: the CD the node is a warm spare of, "" when none).

    Raises:
        computedomain.NodeHeldError: another CD holds the node (retryable: it may leave).
    """
    held = claims_by_holder(cp, exclude=claim)
    if warm_for and warm_for != domain_uid and domain_uid not in held:
        raise computedomain.NodeHeldError(
            f"node {node} is a warm spare reserved for ComputeDomain {warm_for} (node label "
            f"{names.WARM_FOR_LABEL}={warm_for}); ComputeDomain {domain_uid} can use it once "
            "that label is gone"
        )
    others = {d for d in held if d != domain_uid}
    if others:
        holder = sorted(others)[0]
        claims = ", ".join(sorted(claims_by_holder(cp)[holder]))
        raise computedomain.NodeHeldError(
            f"node {node} is held by another ComputeDomain ({holder}, claims "
            f"{claims}); ComputeDomain {domain_uid} can use it once that one leaves"
        )
