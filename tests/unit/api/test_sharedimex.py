"""The per-clique scope's pure contract: scopes, registry names, channel allocation."""

from __future__ import annotations

import pytest

from compute_domains.api import sharedimex
from compute_domains.api.sharedimex import Scope


def test_scope_defaults_and_refuses_unknown_values() -> None:
    assert sharedimex.scope_of(None) is Scope.PER_DOMAIN
    assert sharedimex.scope_of({}, Scope.PER_CLIQUE) is Scope.PER_CLIQUE
    assert sharedimex.scope_of({sharedimex.SCOPE_ANNOTATION: "perClique"}) is Scope.PER_CLIQUE
    with pytest.raises(ValueError, match="'perNode' is not one of perDomain, perClique"):
        sharedimex.scope_of({sharedimex.SCOPE_ANNOTATION: "perNode"})


def test_registry_names_never_look_like_a_cd_clique() -> None:
    name = sharedimex.registry_name("abc.3")
    assert name == "shared-imex.abc.3"
    assert sharedimex.is_registry_name(name)
    assert not sharedimex.is_registry_name("5f0c7e2a-0000-4000-8000-000000000001.abc.3")


def test_a_cd_keeps_its_channel_and_a_new_one_gets_the_lowest_free() -> None:
    held = {
        sharedimex.channel_key("a"): "1",
        sharedimex.channel_key("b"): "3",
        "other/annotation": "2",
        sharedimex.channel_key("bad"): "x",
    }
    assert sharedimex.channels(held) == {"a": 1, "b": 3}
    assert sharedimex.allocate(held, "b") == (3, False)
    assert sharedimex.allocate(held, "c") == (2, True)
    assert sharedimex.allocate({}, "c") == (sharedimex.FIRST_CHANNEL, True)


def test_channel_zero_and_out_of_range_numbers_are_never_counted_or_given() -> None:
    held = {sharedimex.channel_key("a"): "0", sharedimex.channel_key("b"): "2048"}
    assert sharedimex.channels(held) == {}
    assert sharedimex.allocate(held, "c") == (1, True)


def test_a_full_clique_refuses_with_a_reason() -> None:
    full = {sharedimex.channel_key(f"cd{i}"): str(i) for i in range(1, sharedimex.CHANNEL_LIMIT)}
    with pytest.raises(sharedimex.ChannelsExhaustedError, match="all 2047 IMEX channels"):
        sharedimex.allocate(full, "late")
    assert sharedimex.allocate(full, "cd7") == (7, False)


def test_the_selector_admits_free_and_shared_nodes_only() -> None:
    cel = sharedimex.channel_selector()
    assert cel.startswith("!has(")
    assert f'== "{sharedimex.SHARED_HOLDER}"' in cel


@pytest.mark.parametrize(
    "raw",
    [
        None,
        "not json",
        '["a list"]',
        '{"node": "n1", "ip": "10.0.0.1", "reason": "R", "message": ""}',
        '{"node": "n1", "ip": "10.0.0.1", "reason": 3, "message": "m"}',
        '{"node": "n2", "ip": "10.0.0.2", "reason": "R", "message": "m"}',  # an earlier writer
    ],
)
def test_a_blocked_note_counts_only_when_whole_and_its_writers(raw: str | None) -> None:
    annotations = {} if raw is None else {sharedimex.blocked_key(4): raw}
    assert sharedimex.blocked_of(annotations, index=4, node="n1", ip="10.0.0.1") is None


def test_a_blocked_note_reads_back_as_written() -> None:
    note = sharedimex.Blocked(reason="ImexSessionInUse", message="held")
    value = sharedimex.blocked_value("n1", "10.0.0.1", note)
    annotations = {sharedimex.blocked_key(4): value}
    assert sharedimex.blocked_key(4) == "compute-domains/imex-blocked.4"
    assert sharedimex.blocked_of(annotations, index=4, node="n1", ip="10.0.0.1") == note
    assert sharedimex.blocked_of(annotations, index=5, node="n1", ip="10.0.0.1") is None
