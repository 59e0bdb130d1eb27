"""The node's holder: the one ComputeDomain whose channel claims are live on it (pure).

A node serves at most one ComputeDomain at a time (one IMEX daemon, one node label). The holder
is derived from the checkpoint alone, never stored: it is the CD of the channel devices that live
entries (``PrepareStarted``, ``PrepareCompleted`` or ``PrepareAborted``) hold. The plugin labels
the node for it and advertises it on every channel slot (``devices``); a channel claim of
another CD is refused until the holder's last channel claim is unprepared.
"""

from __future__ import annotations

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


def check_free_for(cp: checkpoint.Checkpoint, *, node: str, domain_uid: str, claim: str) -> None:
    """Refuse a channel claim (UID ``claim``) of CD ``domain_uid`` if another CD holds the node.

    Raises:
        computedomain.NodeHeldError: another CD holds the node (retryable: it may leave).
    """
    others = {d for d in claims_by_holder(cp, exclude=claim) if d != domain_uid}
    if others:
        holder = sorted(others)[0]
        claims = ", ".join(sorted(claims_by_holder(cp)[holder]))
        raise computedomain.NodeHeldError(
            f"node {node} is held by another ComputeDomain ({holder}, claims "
            f"{claims}); ComputeDomain {domain_uid} can use it once that one leaves"
        )
