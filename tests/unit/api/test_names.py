"""Names and naming helpers shared with upstream."""

from __future__ import annotations

import re

import pytest

from compute_domains.api import names


def test_api_version_joins_group_and_version() -> None:
    assert names.API_VERSION == "resource.nvidia.com/v1beta1"


def test_finalizer_is_the_compute_domain_label() -> None:
    assert names.FINALIZER == names.COMPUTE_DOMAIN_LABEL == "resource.nvidia.com/computeDomain"


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        (0, "compute-domain-daemon-0000"),
        (7, "compute-domain-daemon-0007"),
        (17, "compute-domain-daemon-0017"),
        (12345, "compute-domain-daemon-12345"),
    ],
    ids=["zero", "one-digit", "two-digits", "wider-than-four"],
)
def test_imex_dns_name_is_zero_padded_to_four_digits(index: int, expected: str) -> None:
    assert names.imex_dns_name(index) == expected


def test_imex_dns_names_carry_their_domains_infix() -> None:
    uid = "0b9e2f8c-5a41-4d2e-9b1c-aaaaaaaaaaaa"
    infix = names.imex_dns_infix(uid)
    assert re.fullmatch(r"[0-9a-f]{10}", infix)
    assert names.imex_dns_name(7, uid) == f"compute-domain-daemon-{infix}-0007"
    assert names.imex_dns_name(7, uid) == names.imex_dns_name(7, uid)  # stable
    # Another CD, a clique's shared domain, and none (NVIDIA's names) never meet.
    others = {names.imex_dns_name(7, d) for d in ("another-uid", "shared-imex.c.1", "")}
    assert len(others | {names.imex_dns_name(7, uid)}) == 4
    assert names.imex_dns_infix("") == ""


def test_imex_dns_name_rejects_the_non_fabric_index() -> None:
    with pytest.raises(ValueError, match="-1"):
        names.imex_dns_name(names.NON_FABRIC_INDEX)


def test_daemon_objects_are_named_after_the_domain_uid() -> None:
    assert names.daemon_object_name("u-1") == "computedomain-daemon-u-1"


def test_clique_object_name_is_uid_dot_clique_id() -> None:
    clique = names.clique_id("c0ffee00-0000-0000-0000-000000000001", 3)
    assert clique == "c0ffee00-0000-0000-0000-000000000001.3"
    assert names.clique_object_name("u-1", clique) == f"u-1.{clique}"


def test_default_max_nodes_per_imex_domain_is_18() -> None:
    assert names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN == 18


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("a", True),
        ("channel-0", True),
        ("a.b-c.d0", True),
        ("Channel", False),
        ("chan_0", False),
        ("chan-", False),
        ("a..b", False),
        ("abc\n", False),
        ("", False),
    ],
    ids=[
        "one-char",
        "simple",
        "dotted",
        "uppercase",
        "underscore",
        "trailing-dash",
        "empty-label",
        "trailing-newline",
        "empty",
    ],
)
def test_dns_subdomain_pattern_accepts_exactly_rfc1123_names(name: str, valid: bool) -> None:
    # The CRD's `pattern` is this expression anchored; Python's `$` would also match before a
    # final newline, Go's (the API server's) does not, so match it whole here.
    assert (re.fullmatch(names.DNS_SUBDOMAIN_REGEX, name) is not None) is valid
