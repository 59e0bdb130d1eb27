"""Validation of ComputeDomain specs: every field error, with its path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from compute_domains.api import validation
from compute_domains.api.computedomain import (
    ChannelSpec,
    ComputeDomainSpec,
    ResourceClaimTemplateRef,
)
from compute_domains.api.validation import FieldError

from . import strategies


def _spec(name: Any = "channel-0", **channel: Any) -> dict[str, Any]:
    return {"channel": {"resourceClaimTemplate": {"name": name}, **channel}}


@pytest.mark.parametrize(
    "spec",
    [
        _spec(),
        _spec("a"),
        _spec("a.b-c.d0"),
        _spec("x" * 253),
        _spec(allocationMode="All"),
        _spec(allocationMode="Single"),
        _spec(allocationMode=""),
        {**_spec(), "numNodes": 0},
        {**_spec(), "numNodes": 18},
    ],
    ids=[
        "simple",
        "one-char",
        "dotted",
        "max-length",
        "all",
        "single",
        "empty-mode",
        "zero-nodes",
        "eighteen-nodes",
    ],
)
def test_valid_specs_have_no_errors(spec: dict[str, Any]) -> None:
    assert validation.validate_spec_dict(spec) == []


NAME = "spec.channel.resourceClaimTemplate.name"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({**_spec(), "numNodes": -1}, [("spec.numNodes", "must be >= 0, got -1")]),
        ({**_spec(), "numNodes": "3"}, [("spec.numNodes", "expected integer, got string")]),
        ({**_spec(), "numNodes": True}, [("spec.numNodes", "expected integer, got boolean")]),
        (_spec("Channel"), [(NAME, 'invalid value "Channel"')]),
        (_spec("chan_0"), [(NAME, 'invalid value "chan_0"')]),
        (_spec("chan-"), [(NAME, 'invalid value "chan-"')]),
        (_spec("a..b"), [(NAME, 'invalid value "a..b"')]),
        (_spec("abc\n"), [(NAME, "invalid value")]),
        (_spec(""), [(NAME, "must not be empty")]),
        (_spec("x" * 254), [(NAME, "no more than 253 characters")]),
        (_spec(7), [(NAME, "expected string, got integer")]),
        (_spec(None), [(NAME, "required field missing")]),
        (_spec(allocationMode="all"), [("spec.channel.allocationMode", 'unsupported value "all"')]),
        (
            _spec(allocationMode=1),
            [("spec.channel.allocationMode", "expected string, got integer")],
        ),
        ({}, [("spec.channel", "required field missing")]),
        ({"channel": {}}, [("spec.channel.resourceClaimTemplate", "required field missing")]),
        ({"channel": "x"}, [("spec.channel", "expected object, got string")]),
        ([], [("spec", "expected object, got array")]),
        ({**_spec(), "extra": 1}, [("spec.extra", 'unknown field "spec.extra"')]),
        (
            {"numNodes": -2, "channel": {"resourceClaimTemplate": {"name": "B"}, "mode": "All"}},
            [("spec.numNodes", ">= 0"), ("spec.channel.mode", "unknown field"), (NAME, "invalid")],
        ),
    ],
    ids=[
        "negative-nodes",
        "string-nodes",
        "bool-nodes",
        "uppercase",
        "underscore",
        "trailing-dash",
        "empty-label",
        "trailing-newline",
        "empty-name",
        "too-long",
        "name-not-string",
        "name-missing",
        "mode-wrong-case",
        "mode-not-string",
        "no-channel",
        "no-template",
        "channel-not-object",
        "spec-not-object",
        "unknown-field",
        "all-errors-at-once",
    ],
)
def test_invalid_specs_report_every_error_by_path(
    spec: Any, expected: list[tuple[str, str]]
) -> None:
    errors = validation.validate_spec_dict(spec)
    assert [e.path for e in errors] == [path for path, _ in expected]
    for error, (_, fragment) in zip(errors, expected, strict=True):
        assert fragment in error.message


def test_a_compute_domain_without_spec_is_one_error() -> None:
    assert validation.validate_computedomain({"metadata": {"name": "x"}}) == [
        FieldError(path="spec", message="required field missing")
    ]
    assert validation.validate_computedomain({"spec": _spec()}) == []


def test_typed_specs_are_checked_too() -> None:
    spec = ComputeDomainSpec(
        channel=ChannelSpec(resource_claim_template=ResourceClaimTemplateRef(name="Bad")),
        num_nodes=-1,
    )
    errors = validation.validate_spec(spec)
    assert [str(e).split(":")[0] for e in errors] == ["spec.numNodes", NAME]


@settings(max_examples=100, deadline=None)
@given(strategies.specs)
def test_generated_valid_specs_pass(spec: ComputeDomainSpec) -> None:
    assert validation.validate_spec(spec) == []
