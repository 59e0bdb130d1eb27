"""Opaque claim configs: strict decoding, defaults, dispatch by apiVersion/kind."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_domains.api import configs
from compute_domains.api.computedomain import AllocationMode
from compute_domains.api.configs import (
    ComputeDomainChannelConfig,
    ComputeDomainDaemonConfig,
    DecodeError,
)
from compute_domains.infra.errors import PermanentError

V = "resource.nvidia.com/v1beta1"


def _channel(fields: str) -> str:
    """A channel config document with the given raw JSON fields (duplicates stay duplicates)."""
    return '{"apiVersion":"' + V + '","kind":"ComputeDomainChannelConfig",' + fields + "}"


def _daemon(fields: str) -> str:
    """A daemon config document with the given raw JSON fields."""
    return '{"apiVersion":"' + V + '","kind":"ComputeDomainDaemonConfig",' + fields + "}"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (_channel('"domainID":"u1"'), ComputeDomainChannelConfig(domain_uid="u1")),
        (
            _channel('"domainID":"u1","allocationMode":"All"'),
            ComputeDomainChannelConfig(domain_uid="u1", allocation_mode=AllocationMode.ALL),
        ),
        (
            _channel('"domainID":"u1","allocationMode":"Single"'),
            ComputeDomainChannelConfig(domain_uid="u1"),
        ),
        (
            _channel('"domainID":"u1","allocationMode":""'),
            ComputeDomainChannelConfig(domain_uid="u1"),
        ),
        (
            _channel('"domainID":"u1","allocationMode":null'),
            ComputeDomainChannelConfig(domain_uid="u1"),
        ),
        (_daemon('"domainID":"u2"'), ComputeDomainDaemonConfig(domain_uid="u2")),
        ((_daemon('"domainID":"u2"')).encode(), ComputeDomainDaemonConfig(domain_uid="u2")),
        (
            {"apiVersion": V, "kind": "ComputeDomainDaemonConfig", "domainID": "u3"},
            ComputeDomainDaemonConfig(domain_uid="u3"),
        ),
    ],
    ids=[
        "channel-default-mode",
        "channel-all",
        "channel-single",
        "empty-mode-is-single",
        "null-mode-is-single",
        "daemon",
        "daemon-bytes",
        "daemon-dict",
    ],
)
def test_valid_configs_decode_with_defaults(
    raw: str | bytes | dict[str, Any], expected: configs.OpaqueConfig
) -> None:
    assert configs.decode(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (_channel('"domainID":"u1","bogus":1'), 'unknown field "bogus"'),
        (_daemon('"domainID":"u1","allocationMode":"All"'), 'unknown field "allocationMode"'),
        (_channel('"domainID":"u1","metadata":{}'), 'unknown field "metadata"'),
        (_channel('"domainID":"a","domainID":"b"'), 'duplicate field "domainID"'),
        (
            '{"apiVersion":"resource.nvidia.com/v1beta1","apiVersion":"resource.nvidia.com/v1beta1",'
            '"kind":"ComputeDomainDaemonConfig","domainID":"u"}',
            'duplicate field "apiVersion"',
        ),
        (_channel('"domainID":5'), "domainID: expected string, got integer"),
        (
            _channel('"domainID":"u","allocationMode":true'),
            "allocationMode: expected string, got boolean",
        ),
        (_channel('"domainID":"u","allocationMode":"Multi"'), 'unsupported value "Multi"'),
        (_channel('"allocationMode":"All"'), "domainID: required field missing"),
        (_daemon('"domainID":""'), "domainID: must not be empty"),
        (_daemon('"domainID":null'), "domainID: required field missing"),
        (
            _channel('"x":1').replace("ComputeDomainChannelConfig", "GpuConfig"),
            'unknown kind "GpuConfig"',
        ),
        (
            '{"apiVersion":"resource.nvidia.com/v1","kind":"ComputeDomainDaemonConfig",'
            '"domainID":"u"}',
            'unsupported apiVersion "resource.nvidia.com/v1"',
        ),
        ('{"kind":"ComputeDomainDaemonConfig","domainID":"u"}', "apiVersion: required field"),
        (
            '{"apiVersion":"resource.nvidia.com/v1beta1","domainID":"u"}',
            "kind: required field missing",
        ),
        (
            '{"apiVersion":"resource.nvidia.com/v1beta1","kind":7,"domainID":"u"}',
            "kind: expected string, got integer",
        ),
        ("[]", "expected object, got array"),
        ("{not json", "invalid JSON"),
        (b"\xff\xfe", "invalid UTF-8"),
        ("", "invalid JSON"),
    ],
    ids=[
        "unknown-field",
        "channel-field-in-daemon",
        "metadata-not-allowed",
        "duplicate-key",
        "duplicate-api-version",
        "domain-id-type",
        "mode-type",
        "unknown-mode",
        "missing-domain",
        "empty-domain",
        "null-domain",
        "unknown-kind",
        "unknown-api-version",
        "missing-api-version",
        "missing-kind",
        "kind-type",
        "not-an-object",
        "malformed-json",
        "bad-utf8",
        "empty-document",
    ],
)
def test_malformed_configs_fail_permanently_with_a_clear_message(
    raw: str | bytes, message: str
) -> None:
    with pytest.raises(DecodeError) as info:
        configs.decode(raw)
    assert message in str(info.value)
    assert isinstance(info.value, PermanentError)


def test_unknown_field_message_names_the_kind() -> None:
    with pytest.raises(
        DecodeError,
        match=r'^invalid ComputeDomainChannelConfig: strict decoding error: unknown field "x"$',
    ):
        configs.decode(_channel('"domainID":"u","x":1'))


def test_wire_form_matches_what_the_controller_embeds() -> None:
    assert ComputeDomainChannelConfig(domain_uid="u").to_dict() == {
        "apiVersion": V,
        "kind": "ComputeDomainChannelConfig",
        "domainID": "u",
        "allocationMode": "Single",
    }
    assert ComputeDomainDaemonConfig(domain_uid="u").to_dict() == {
        "apiVersion": V,
        "kind": "ComputeDomainDaemonConfig",
        "domainID": "u",
    }


configs_strategy = st.one_of(
    st.builds(
        ComputeDomainChannelConfig,
        domain_uid=st.text(min_size=1),
        allocation_mode=st.sampled_from(AllocationMode),
    ),
    st.builds(ComputeDomainDaemonConfig, domain_uid=st.text(min_size=1)),
)


@settings(max_examples=100, deadline=None)
@given(configs_strategy)
def test_configs_round_trip_through_encode(config: configs.OpaqueConfig) -> None:
    assert configs.decode(configs.encode(config)) == config
    assert configs.decode(json.dumps(config.to_dict())) == config


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1).filter(lambda k: k not in {"apiVersion", "kind", "domainID"}))
def test_any_extra_field_of_a_daemon_config_is_rejected(field: str) -> None:
    raw = {"apiVersion": V, "kind": "ComputeDomainDaemonConfig", "domainID": "u", field: 1}
    with pytest.raises(DecodeError, match="unknown field"):
        configs.decode(json.dumps(raw))


def _claim_with(params: str, driver: str = "compute-domain.nvidia.com") -> bytes:
    """A ResourceClaim body as the API server sends it, opaque ``params`` kept byte for byte."""
    config = '{"source":"FromClaim","requests":["chan"],"opaque":{"driver":"' + driver + '",'
    config += '"parameters":' + params + "}}"
    return (
        '{"metadata":{"uid":"c1"},"status":{"allocation":{"devices":{"config":[' + config + "]}}}}"
    ).encode()


def _params(claim: dict[str, Any]) -> Any:
    return claim["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (_channel('"domainID":"a","domainID":"b"'), 'duplicate field "domainID"'),
        (_daemon('"domainID":"u","kind":"ComputeDomainDaemonConfig"'), 'duplicate field "kind"'),
        (_channel('"domainID":"u","extra":{"x":1,"x":2}'), 'duplicate field "extra.x"'),
    ],
    ids=["domain-id", "kind", "nested"],
)
def test_a_repeated_key_in_parameters_of_a_marked_claim_is_rejected(
    params: str, message: str
) -> None:
    claim = configs.parse_marking(_claim_with(params))
    assert _params(claim) == json.loads(params), "as any decoder reads it: the last value wins"
    with pytest.raises(DecodeError, match=f"strict decoding error: {message}"):
        configs.decode(_params(claim))


def test_a_marked_claim_without_repeated_keys_decodes_and_plain_mappings_are_not_checked() -> None:
    claim = configs.parse_marking(_claim_with(_channel('"domainID":"u1"')))
    assert configs.decode(_params(claim)) == ComputeDomainChannelConfig(domain_uid="u1")
    plain = json.loads(_channel('"domainID":"a","domainID":"b"'))
    assert configs.decode(plain) == ComputeDomainChannelConfig(domain_uid="b")


def test_parse_marking_refuses_what_is_not_one_json_object() -> None:
    with pytest.raises(DecodeError, match="expected object, got array"):
        configs.parse_marking(b"[]")
    with pytest.raises(DecodeError, match="invalid JSON"):
        configs.parse_marking(b"{")
