"""Daemon index → DNS name, and our managed block in a hosts file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_domains.api import names
from compute_domains.daemon import dnsnames
from compute_domains.daemon.dnsnames import BEGIN_MARKER, END_MARKER

KUBELET_HOSTS = (
    "# Kubernetes-managed hosts file.\n"
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "10.0.0.9\tcomputedomain-daemon-abc-xyz\n"
)


@pytest.mark.parametrize(
    ("index", "name"),
    [
        (0, "compute-domain-daemon-0000"),
        (7, "compute-domain-daemon-0007"),
        (17, "compute-domain-daemon-0017"),
        (9999, "compute-domain-daemon-9999"),
        (12345, "compute-domain-daemon-12345"),
    ],
)
def test_index_maps_to_a_stable_name(index: int, name: str) -> None:
    assert dnsnames.dns_name(index) == name
    assert dnsnames.index_of(name) == index


def test_negative_index_has_no_name() -> None:
    with pytest.raises(ValueError):
        dnsnames.dns_name(-1)


@pytest.mark.parametrize(
    "name",
    [
        "compute-domain-daemon-7",
        "compute-domain-daemon-00007",
        "compute-domain-daemon-abcd",
        "compute-domain-daemon-",
        "computedomain-daemon-0001",
        "compute-domain-daemon-\u0660\u0660\u0660\u0661",
    ],
    ids=["short", "over-padded", "letters", "empty", "other-prefix", "non-ascii-digits"],
)
def test_other_names_have_no_index(name: str) -> None:
    assert dnsnames.index_of(name) is None


UID = "0b9e2f8c-5a41-4d2e-9b1c-aaaaaaaaaaaa"


def test_a_domains_names_carry_its_infix_and_keep_their_index() -> None:
    name = dnsnames.dns_name(7, UID)
    assert name == f"compute-domain-daemon-{names.imex_dns_infix(UID)}-0007"
    assert dnsnames.index_of(name) == 7
    assert dnsnames.index_of("compute-domain-daemon-8585d4965d-0017") == 17  # upstream's
    for odd in ("compute-domain-daemon-8585d4965d-17", "compute-domain-daemon-8585D4965D-0017"):
        assert dnsnames.index_of(odd) is None


def test_two_domains_list_no_name_in_common() -> None:
    a, b = dnsnames.static_node_names(18, UID), dnsnames.static_node_names(18, "other")
    assert len(set(a)) == 18 and not set(a) & set(b)
    assert not set(a) & set(dnsnames.static_node_names(18))


def test_a_block_of_another_domain_is_replaced_whole() -> None:
    """A resident agent serving CD B after CD A keeps one hosts file: no name of A survives."""
    first = dnsnames.render_hosts(KUBELET_HOSTS, {0: "10.0.0.1", 1: "10.0.0.2"}, "cd-a")
    second = dnsnames.render_hosts(first, {0: "10.0.0.1"}, UID)
    assert second == KUBELET_HOSTS + (
        f"{BEGIN_MARKER}\n10.0.0.1\t{dnsnames.dns_name(0, UID)}\n{END_MARKER}\n"
    )


def test_static_names_cover_every_slot() -> None:
    names = dnsnames.static_node_names(18)
    assert len(names) == 18 and names[0].endswith("0000") and names[-1].endswith("0017")


def test_sentinels_fill_only_unfilled_slots() -> None:
    filled = dnsnames.with_sentinels({1: "10.0.0.1"}, 3, "127.0.0.2")
    assert filled == {0: "127.0.0.2", 1: "10.0.0.1", 2: "127.0.0.2"}


def test_block_is_appended_after_the_kubelet_lines() -> None:
    text = dnsnames.render_hosts(KUBELET_HOSTS, {1: "10.0.0.2", 0: "10.0.0.1"})
    assert text == KUBELET_HOSTS + (
        f"{BEGIN_MARKER}\n"
        "10.0.0.1\tcompute-domain-daemon-0000\n"
        "10.0.0.2\tcompute-domain-daemon-0001\n"
        f"{END_MARKER}\n"
    )


def test_block_is_replaced_in_place_and_later_lines_survive() -> None:
    before = dnsnames.render_hosts("a\n", {0: "10.0.0.1"}) + "z\n"
    after = dnsnames.render_hosts(before, {0: "10.0.0.7", 3: "10.0.0.8"})
    assert after == (
        f"a\n{BEGIN_MARKER}\n10.0.0.7\tcompute-domain-daemon-0000\n"
        f"10.0.0.8\tcompute-domain-daemon-0003\n{END_MARKER}\nz\n"
    )


def test_empty_mapping_removes_the_block() -> None:
    with_block = dnsnames.render_hosts(KUBELET_HOSTS, {0: "10.0.0.1"})
    assert dnsnames.render_hosts(with_block, {}) == KUBELET_HOSTS
    assert dnsnames.render_hosts("", {}) == ""


def test_unterminated_and_duplicate_blocks_fold_into_one() -> None:
    corrupt = (
        f"a\n{BEGIN_MARKER}\n10.0.0.1\tcompute-domain-daemon-0000\nforeign line\n"
        f"b\n{BEGIN_MARKER}\n10.0.0.2\tcompute-domain-daemon-0001\n{END_MARKER}\nc\n"
    )
    text = dnsnames.render_hosts(corrupt, {2: "10.0.0.3"})
    assert text == (
        f"a\n{BEGIN_MARKER}\n10.0.0.3\tcompute-domain-daemon-0002\n{END_MARKER}\n"
        "foreign line\nb\nc\n"
    )


_foreign_line = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
    max_size=40,
).filter(lambda line: line.strip() not in (BEGIN_MARKER, END_MARKER))
_foreign = st.lists(_foreign_line, max_size=8).map(lambda lines: "".join(f"{x}\n" for x in lines))
_ip = st.tuples(*(st.integers(0, 255) for _ in range(4))).map(lambda t: ".".join(map(str, t)))
_mapping = st.dictionaries(st.integers(0, 17), _ip, max_size=18)


@settings(max_examples=200, deadline=None)
@given(base=_foreign, mappings=st.lists(_mapping, min_size=1, max_size=6))
def test_rewrites_are_idempotent_preserve_foreign_lines_and_do_not_grow(
    base: str, mappings: list[dict[int, str]]
) -> None:
    text = base
    for mapping in mappings:
        text = dnsnames.render_hosts(text, mapping)
    final = mappings[-1]
    assert dnsnames.render_hosts(text, final) == text  # idempotent
    assert dnsnames.render_hosts(base, final) == text  # depends only on base + mapping
    assert dnsnames.render_hosts(text, {}) == base  # foreign lines preserved exactly
    block = sum(len(f"{ip}\t{dnsnames.dns_name(i)}\n") for i, ip in final.items())
    markers = len(BEGIN_MARKER) + len(END_MARKER) + 2 if final else 0
    assert len(text) == len(base) + block + markers  # no growth across rewrites


def test_update_reports_whether_the_file_changed(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text(KUBELET_HOSTS)
    assert dnsnames.update_hosts_file(hosts, {0: "10.0.0.1"})
    assert not dnsnames.update_hosts_file(hosts, {0: "10.0.0.1"})
    assert dnsnames.update_hosts_file(hosts, {0: "10.0.0.2"})
    assert "10.0.0.2\tcompute-domain-daemon-0000\n" in hosts.read_text()
    assert hosts.read_text().startswith(KUBELET_HOSTS)
    assert hosts.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hosts"]


def test_update_creates_a_missing_file(tmp_path: Path) -> None:
    hosts = tmp_path / "etc" / "hosts"
    assert dnsnames.update_hosts_file(hosts, {5: "10.0.0.6"})
    assert hosts.read_text() == (
        f"{BEGIN_MARKER}\n10.0.0.6\tcompute-domain-daemon-0005\n{END_MARKER}\n"
    )
