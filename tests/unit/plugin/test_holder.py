"""The node's holder: derived from the live channel devices of the checkpoint."""

from __future__ import annotations

import datetime

import pytest

from compute_domains.plugin import checkpoint, computedomain, holder

T0 = datetime.datetime(2026, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
State = checkpoint.ClaimState


def _entry(uid: str, domain_uid: str, state: State, kind: str = "channel") -> checkpoint.ClaimEntry:
    device = checkpoint.PreparedDevice(
        pool_name="node-a", device_name=f"{kind}-0", kind=kind, domain_uid=domain_uid
    )
    return checkpoint.ClaimEntry(
        uid=uid,
        namespace="ns",
        name=f"claim-{uid}",
        state=state,
        started_at=T0,
        updated_at=T0,
        devices=(device,),
    )


def _checkpoint(*entries: checkpoint.ClaimEntry) -> checkpoint.Checkpoint:
    cp = checkpoint.Checkpoint()
    for entry in entries:
        cp = cp.with_claim(entry)
    return cp


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ((), ""),
        ((_entry("c1", "cd-a", State.PREPARE_STARTED),), "cd-a"),
        ((_entry("c1", "cd-a", State.PREPARE_COMPLETED),), "cd-a"),
        ((_entry("c1", "cd-a", State.PREPARE_ABORTED),), "cd-a"),
        ((_entry("c1", "cd-a", State.UNPREPARED),), ""),
        ((_entry("c1", "cd-a", State.PREPARE_COMPLETED, kind="daemon"),), ""),
        (
            (
                _entry("c1", "cd-b", State.PREPARE_COMPLETED),
                _entry("c2", "cd-a", State.PREPARE_COMPLETED),
            ),
            "cd-a",
        ),
    ],
    ids=["empty", "started", "completed", "aborted", "tombstone", "daemon-only", "two-lowest"],
)
def test_the_holder_is_the_cd_of_live_channel_devices(
    entries: tuple[checkpoint.ClaimEntry, ...], expected: str
) -> None:
    assert holder.holder_of(_checkpoint(*entries)) == expected


def test_claims_are_grouped_by_holder_without_the_excluded_one() -> None:
    cp = _checkpoint(
        _entry("c1", "cd-a", State.PREPARE_COMPLETED),
        _entry("c2", "cd-a", State.PREPARE_STARTED),
        _entry("c3", "cd-b", State.UNPREPARED),
    )
    assert holder.claims_by_holder(cp) == {"cd-a": {"c1", "c2"}}
    assert holder.claims_by_holder(cp, exclude="c1") == {"cd-a": {"c2"}}


def test_a_channel_claim_of_another_cd_is_refused_while_the_node_is_held() -> None:
    cp = _checkpoint(_entry("c1", "cd-a", State.PREPARE_COMPLETED))
    holder.check_free_for(cp, node="n1", domain_uid="cd-a", claim="c2")
    holder.check_free_for(cp, node="n1", domain_uid="cd-b", claim="c1")  # its own last claim
    with pytest.raises(
        computedomain.NodeHeldError, match=r"node n1 is held by .*\(cd-a, claims c1\)"
    ):
        holder.check_free_for(cp, node="n1", domain_uid="cd-b", claim="c2")


def test_a_warm_node_is_held_by_its_cd_and_refuses_another_cds_claim() -> None:
    free = _checkpoint()
    assert holder.effective(free, "cd-warm") == "cd-warm"
    assert holder.effective(free, "") == ""
    holder.check_free_for(free, node="n1", domain_uid="cd-warm", claim="c1", warm_for="cd-warm")
    with pytest.raises(
        computedomain.NodeHeldError,
        match=r"node n1 is a warm spare reserved for ComputeDomain cd-warm \(node label "
        r"compute-domains/warm-for=cd-warm\); ComputeDomain cd-b can use it",
    ):
        holder.check_free_for(free, node="n1", domain_uid="cd-b", claim="c1", warm_for="cd-warm")


def test_live_claims_come_before_the_warm_label() -> None:
    cp = _checkpoint(_entry("c1", "cd-a", State.PREPARE_COMPLETED))
    assert holder.effective(cp, "cd-warm") == "cd-a"
    # cd-a's next claim still prepares (it holds the node); cd-warm's is refused (cd-a holds it).
    holder.check_free_for(cp, node="n1", domain_uid="cd-a", claim="c2", warm_for="cd-warm")
    with pytest.raises(computedomain.NodeHeldError, match=r"held by .*\(cd-a, claims c1\)"):
        holder.check_free_for(cp, node="n1", domain_uid="cd-warm", claim="c2", warm_for="cd-warm")
