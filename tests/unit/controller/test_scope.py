"""A CD's isolation scope: fixed at its first reconcile, later edits and bad values refused."""

from __future__ import annotations

import pytest

from compute_domains.api import conditions, names, sharedimex
from compute_domains.api.sharedimex import Scope
from compute_domains.controller import config, scope
from compute_domains.infra import errors

ANN, FIXED = sharedimex.SCOPE_ANNOTATION, sharedimex.FIXED_SCOPE_ANNOTATION
D, C = Scope.PER_DOMAIN, Scope.PER_CLIQUE
OURS = [names.FINALIZER]


@pytest.mark.parametrize(
    ("annotations", "default", "want", "write"),
    [
        ({}, D, D, {ANN: "perDomain", FIXED: "perDomain"}),
        ({}, C, C, {ANN: "perClique", FIXED: "perClique"}),
        ({ANN: "perDomain"}, C, D, {FIXED: "perDomain"}),  # the user's choice is kept
        ({ANN: "perClique"}, D, C, {FIXED: "perClique"}),
    ],
)
def test_first_reconcile_fixes_the_annotation_or_the_default(
    annotations: dict[str, str], default: Scope, want: Scope, write: dict[str, str]
) -> None:
    got = scope.admit(annotations, [], default=default, resident=True)
    assert (got.scope, dict(got.write), got.refusal, got.changed) == (want, write, None, "")


def test_once_fixed_nothing_is_written_again() -> None:
    got = scope.admit({ANN: "perClique", FIXED: "perClique"}, OURS, default=D, resident=True)
    assert (got.scope, dict(got.write), got.changed) == (C, {}, "")
    assert got.condition(3) is None


@pytest.mark.parametrize(
    ("annotations", "now"),
    [
        ({ANN: "perClique", FIXED: "perDomain"}, "now says 'perClique'"),
        ({ANN: "perNode", FIXED: "perDomain"}, "now says 'perNode'"),
        ({FIXED: "perDomain"}, "is gone"),
    ],
)
def test_a_later_edit_is_refused_and_the_fixed_scope_served(
    annotations: dict[str, str], now: str
) -> None:
    got = scope.admit(annotations, OURS, default=C, resident=True)
    assert got.scope is D and not got.write and got.refusal is None
    assert "fixed at creation" in got.changed and now in got.changed
    assert "delete the ComputeDomain and create it again" in got.changed
    cond = got.condition(7)
    assert cond is not None
    assert (cond.type, cond.status, cond.reason, cond.observed_generation) == (
        conditions.IMEX_SCOPE,
        conditions.FALSE,
        conditions.SCOPE_CHANGE_REFUSED,
        7,
    )


def test_a_cd_an_earlier_controller_admitted_stays_per_domain() -> None:
    """Our finalizer but no fixed scope: it was served with its own DaemonSet, per domain, even
    with the cluster default now perClique."""
    got = scope.admit({}, OURS, default=C, resident=True)
    assert (got.scope, dict(got.write), got.changed) == (
        D,
        {FIXED: "perDomain", ANN: "perDomain"},
        "",
    )
    asked = scope.admit({ANN: "perClique"}, OURS, default=C, resident=True)
    assert asked.scope is D and dict(asked.write) == {FIXED: "perDomain"}
    assert "now says 'perClique'" in asked.changed


def test_an_unknown_value_is_refused_with_nothing_fixed() -> None:
    got = scope.admit({ANN: "perNode"}, [], default=D, resident=True)
    assert got.scope is None and not got.write and got.refusal is not None
    assert got.refusal.reason == conditions.INVALID_IMEX_SCOPE
    with pytest.raises(ValueError, match="perNode") as err:
        sharedimex.scope_of({ANN: "perNode"})
    assert got.refusal.message.startswith(str(err.value))


def test_per_clique_without_resident_agents_is_refused_with_nothing_fixed() -> None:
    got = scope.admit({ANN: "perClique"}, [], default=D, resident=False)
    assert got.scope is None and not got.write and got.refusal is not None
    assert got.refusal.reason == conditions.IMEX_SCOPE_NEEDS_RESIDENT_AGENTS
    assert "imex.agents=resident" in got.refusal.message
    assert scope.admit({}, [], default=D, resident=False).scope is D  # per domain is fine


def test_allocation_mode_all_refusal_says_why() -> None:
    refusal = scope.all_channels_refusal("job-channel")
    assert refusal.reason == "AllocationModeAllNotIsolated"
    for words in ("all 2048 IMEX channels", "every other ComputeDomain", "Single", "perDomain"):
        assert words in refusal.message
    assert "job-channel" in refusal.message and "Pending" in refusal.message


def test_effective_scope_prefers_the_fixed_one() -> None:
    assert sharedimex.effective_scope({ANN: "perClique", FIXED: "perDomain"}) is D
    assert sharedimex.effective_scope({ANN: "perClique"}) is C
    assert sharedimex.effective_scope({}, C) is C
    assert scope.fixed_scope({ANN: "perClique"}) is None
    assert scope.fixed_scope({FIXED: "perClique"}) is C


def test_a_per_clique_default_needs_resident_agents() -> None:
    daemon = config.DaemonSettings(image="img:1")
    with pytest.raises(errors.ConfigError, match="resident"):
        config.ControllerSettings(namespace="ns", daemon=daemon, default_imex_scope=C)
    ok = config.ControllerSettings(
        namespace="ns", daemon=daemon, default_imex_scope=C, imex_agents="resident"
    )
    assert ok.default_imex_scope is C
