"""The node's holder and scope: derived from the checkpoint's live channel devices and labels."""

from __future__ import annotations

import datetime

import pytest

from compute_domains.api import sharedimex
from compute_domains.plugin import checkpoint, computedomain, holder

T0 = datetime.datetime(2026, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
State = checkpoint.ClaimState


PER_CLIQUE, PER_DOMAIN = sharedimex.Scope.PER_CLIQUE, sharedimex.Scope.PER_DOMAIN
SHARED = sharedimex.SHARED_HOLDER
WARM = holder.NodeLabels(warm_for="cd-warm")
LABELLED = holder.NodeLabels(shared_imex=True)


def _entry(
    uid: str,
    domain_uid: str,
    state: State,
    kind: str = "channel",
    scope: sharedimex.Scope = PER_DOMAIN,
) -> checkpoint.ClaimEntry:
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
        scope=scope,
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
    assert holder.effective(free, WARM) == "cd-warm"
    assert holder.effective(free, holder.NodeLabels()) == ""
    holder.check_free_for(free, node="n1", domain_uid="cd-warm", claim="c1", labels=WARM)
    with pytest.raises(
        computedomain.NodeHeldError,
        match=r"node n1 is a warm spare reserved for ComputeDomain cd-warm \(node label "
        r"compute-domains/warm-for=cd-warm\); ComputeDomain cd-b can use it",
    ):
        holder.check_free_for(free, node="n1", domain_uid="cd-b", claim="c1", labels=WARM)


def test_live_claims_come_before_the_warm_label() -> None:
    cp = _checkpoint(_entry("c1", "cd-a", State.PREPARE_COMPLETED))
    assert holder.effective(cp, WARM) == "cd-a"
    # cd-a's next claim still prepares (it holds the node); cd-warm's is refused (cd-a holds it).
    holder.check_free_for(cp, node="n1", domain_uid="cd-a", claim="c2", labels=WARM)
    with pytest.raises(computedomain.NodeHeldError, match=r"held by .*\(cd-a, claims c1\)"):
        holder.check_free_for(cp, node="n1", domain_uid="cd-warm", claim="c2", labels=WARM)


@pytest.mark.parametrize(
    ("entries", "labels", "expected"),
    [
        ((), LABELLED, SHARED),
        (
            (_entry("c1", "cd-x", State.PREPARE_STARTED, scope=PER_CLIQUE),),
            holder.NodeLabels(),
            SHARED,
        ),
        ((_entry("c1", "cd-x", State.UNPREPARED, scope=PER_CLIQUE),), holder.NodeLabels(), ""),
        ((_entry("c1", "cd-x", State.UNPREPARED, scope=PER_CLIQUE),), LABELLED, SHARED),
        ((), holder.NodeLabels(warm_for="cd-warm", shared_imex=True), SHARED),
        ((_entry("c1", "cd-a", State.PREPARE_COMPLETED),), LABELLED, "cd-a"),
    ],
    ids=[
        "label-alone",
        "live-per-clique-claim",
        "tombstone-only",
        "label-outlives-claims",
        "shared-before-warm",
        "per-domain-claims-first",
    ],
)
def test_a_node_in_the_per_clique_scope_advertises_the_shared_holder(
    entries: tuple[checkpoint.ClaimEntry, ...], labels: holder.NodeLabels, expected: str
) -> None:
    assert holder.effective(_checkpoint(*entries), labels) == expected


def test_per_clique_claims_never_make_a_per_domain_holder() -> None:
    cp = _checkpoint(_entry("c1", "cd-x", State.PREPARE_COMPLETED, scope=PER_CLIQUE))
    assert holder.holder_of(cp) == "" and holder.claims_by_holder(cp) == {}
    assert holder.claims_by_domain(cp, PER_CLIQUE) == {"cd-x": {"c1"}}


def test_several_per_clique_cds_share_a_node() -> None:
    cp = _checkpoint(
        _entry("c1", "cd-x", State.PREPARE_COMPLETED, scope=PER_CLIQUE),
        _entry("c2", "cd-y", State.PREPARE_COMPLETED, scope=PER_CLIQUE),
    )
    holder.check_free_for(cp, node="n1", domain_uid="cd-z", claim="c3", scope=PER_CLIQUE)
    holder.check_free_for(
        _checkpoint(), node="n1", domain_uid="cd-z", claim="c3", scope=PER_CLIQUE, labels=LABELLED
    )
    holder.check_free_for(_checkpoint(), node="n1", domain_uid="cd-z", claim="c3", scope=PER_CLIQUE)


def test_a_per_clique_claim_is_refused_on_a_node_a_per_domain_cd_holds() -> None:
    cp = _checkpoint(_entry("c1", "cd-a", State.PREPARE_COMPLETED))
    with pytest.raises(
        computedomain.NodeHeldError,
        match=r"node n1 is held by another ComputeDomain \(cd-a, scope perDomain, claims c1\); "
        r"ComputeDomain cd-x \(scope perClique\) can use it once that one leaves",
    ):
        holder.check_free_for(cp, node="n1", domain_uid="cd-x", claim="c2", scope=PER_CLIQUE)


@pytest.mark.parametrize(
    ("entries", "labels", "why"),
    [
        (
            (_entry("c1", "cd-x", State.PREPARE_COMPLETED, scope=PER_CLIQUE),),
            holder.NodeLabels(),
            "per-clique claims c1",
        ),
        ((), LABELLED, "node label compute-domains/shared-imex=on"),
    ],
    ids=["live-claims", "label"],
)
def test_a_per_domain_claim_is_refused_on_a_node_in_the_per_clique_scope(
    entries: tuple[checkpoint.ClaimEntry, ...], labels: holder.NodeLabels, why: str
) -> None:
    with pytest.raises(computedomain.NodeHeldError) as caught:
        holder.check_free_for(
            _checkpoint(*entries), node="n1", domain_uid="cd-a", claim="c2", labels=labels
        )
    assert str(caught.value) == (
        f"node n1 is held by the perClique scope (it runs its clique's shared IMEX: {why}); "
        "ComputeDomain cd-a (scope perDomain) can use it once the node leaves that scope "
        "(label compute-domains/shared-imex removed)"
    )


def test_a_warm_spare_refuses_per_clique_claims_until_the_node_is_shared() -> None:
    with pytest.raises(computedomain.NodeHeldError, match=r"warm spare reserved for .*cd-warm"):
        holder.check_free_for(
            _checkpoint(), node="n1", domain_uid="cd-x", claim="c1", scope=PER_CLIQUE, labels=WARM
        )
    shared_and_warm = holder.NodeLabels(warm_for="cd-warm", shared_imex=True)
    holder.check_free_for(
        _checkpoint(),
        node="n1",
        domain_uid="cd-x",
        claim="c1",
        scope=PER_CLIQUE,
        labels=shared_and_warm,
    )
