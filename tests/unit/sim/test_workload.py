"""The mnnvl-workload stand-in's pure parts: domain report parsing, rank sources, channels, and
what it says of MNNVL and RDMA peers (``sim.transport``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from compute_domains.sim import imex_report, transport, workload
from compute_domains.sim.imex_wire import Link


def _rows(states: list[str]) -> list[imex_report.NodeRow]:
    ids = range(len(states))
    return [
        imex_report.NodeRow(
            node_id=i,
            host=f"compute-domain-daemon-{i:04d}",
            status=s,
            version="NO_GPU",
            connections={t: Link.CONNECTED for t in ids} if s == "READY" else {},
        )
        for i, s in enumerate(states)
    ]


def test_parses_the_stand_ins_domain_report_with_the_local_marker() -> None:
    text = imex_report.format_text(
        _rows(["READY", "READY", "READY"]),
        local_id=1,
        timestamp="1/1/2026 00:00:00.000",
        show_host_names=False,
    )
    domain = workload.parse_domain(text)
    assert domain is not None
    assert domain.state == "UP"
    assert domain.local == 1
    assert domain.ready == 3
    assert domain.describe() == (
        "UP, 3/3 configured nodes READY, this node is #1 (compute-domain-daemon-0001)"
    )


def test_parses_a_degraded_domain_with_unavailable_peers() -> None:
    text = imex_report.format_text(
        _rows(["READY", "UNAVAILABLE"]), local_id=0, timestamp="t", show_host_names=False
    )
    domain = workload.parse_domain(text)
    assert domain is not None
    assert (domain.state, domain.ready, len(domain.nodes)) == ("DEGRADED", 1, 2)


def test_parses_the_published_570_layout_without_a_local_marker() -> None:
    text = (
        "Nodes:\n"
        "Node #0   - 172.31.48.81    - READY                - Version: 570.172\n"
        "Node #1   - 172.31.48.98    - READY                - Version: 570.172\n"
        "\n Nodes From\\To  0   1\n       0        C   C\n       1        C   C\n\n"
        "Domain State: UP\n"
    )
    domain = workload.parse_domain(text)
    assert domain is not None
    assert domain.nodes == {0: ("172.31.48.81", "READY"), 1: ("172.31.48.98", "READY")}
    assert domain.local is None


def test_output_without_a_domain_state_is_not_a_report() -> None:
    assert workload.parse_domain("Failed to read node configuration file x\n") is None


@pytest.mark.parametrize(
    ("env", "explicit", "expected"),
    [
        ({}, 7, (7, "--rank")),
        ({"RANK": "3", "JOB_COMPLETION_INDEX": "9"}, None, (3, "RANK")),
        ({"JOB_COMPLETION_INDEX": "9"}, None, (9, "JOB_COMPLETION_INDEX")),
        ({"RANK": "x"}, None, None),
        ({}, None, None),
    ],
    ids=["flag", "rank-first", "indexed-job", "not-a-number", "none"],
)
def test_rank_sources_in_order(
    env: dict[str, str], explicit: int | None, expected: tuple[int, str] | None
) -> None:
    assert workload.rank_from(env, explicit) == expected


@pytest.mark.parametrize(
    ("hostname", "expected"),
    [("trainer-0", 0), ("trainer-12", 12), ("trainer-012", None), ("abc", None)],
)
def test_statefulset_hostname_ordinals(hostname: str, expected: int | None) -> None:
    assert workload.hostname_ordinal(hostname) == expected


@pytest.mark.skipif(os.geteuid() != 0, reason="creating char device nodes needs root")
def test_channels_are_char_devices_listed_by_number(tmp_path: Path) -> None:
    for n in (10, 0, 2):
        os.mknod(tmp_path / f"channel{n}", stat.S_IFCHR | 0o666, os.makedev(234, n))
    (tmp_path / "channelX").write_text("")
    (tmp_path / "channel5").write_text("not a device")
    found = workload.channels(tmp_path)
    assert [(c.path.rsplit("/", 1)[1], c.major, c.minor) for c in found] == [
        ("channel0", 234, 0),
        ("channel2", 234, 2),
        ("channel10", 234, 10),
    ]


def _nic(net: Path, name: str, link: str | None) -> None:
    (net / name).mkdir(parents=True)
    if link is not None:
        (net / name / "device" / "infiniband" / link).mkdir(parents=True)


def test_rdma_nics_are_the_interfaces_with_an_infiniband_device(tmp_path: Path) -> None:
    _nic(tmp_path, "gpu1rdma0", "mlx5_1")
    _nic(tmp_path, "gpu0rdma0", "mlx5_0")
    _nic(tmp_path, "eth0", None)
    (tmp_path / "eth1" / "device" / "infiniband").mkdir(parents=True)  # no link under it
    assert transport.rdma_nics(tmp_path) == ["gpu0rdma0", "gpu1rdma0"]
    assert transport.rdma_nics(tmp_path / "absent") == []


NICS = ("gpu0rdma0", "gpu1rdma0", "gpu2rdma0", "gpu3rdma0")


def test_across_domains_the_transport_falls_back_to_rdma() -> None:
    # The guide's §15.5: 36 ranks, 18 in this NVLink domain.
    said = transport.paths(18, 36, NICS, "2")
    assert said == (
        "MNNVL to the 18 READY nodes of this IMEX domain; at least 18 of 36 ranks are outside "
        "it: fall back to RDMA over 4 NICs (gpu0rdma0, gpu1rdma0, gpu2rdma0, gpu3rdma0)"
    )
    assert transport.paths(2, 2, NICS, "") == (
        "MNNVL to the 2 READY nodes of this IMEX domain; all 2 ranks can be within it"
    )


def test_without_mnnvl_or_nics_the_transport_says_so() -> None:
    off = transport.paths(2, 2, NICS, "0")
    assert off.startswith("NCCL_MNNVL_ENABLE=0: no MNNVL; every peer falls back to RDMA over 4")
    alone = transport.paths(1, 2, (), "")
    assert alone.endswith(
        "1 of 2 ranks are outside it: fall back to sockets (no RDMA NIC in this container)"
    ), alone
    assert transport.paths(0, 2, NICS, "").startswith("no READY IMEX domain: every peer")
    assert "(WORLD_SIZE unknown)" in transport.paths(2, None, NICS, "")


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"WORLD_SIZE": "36", "PMIX_SIZE": "2"}, 36),
        ({"OMPI_COMM_WORLD_SIZE": "8"}, 8),
        ({"WORLD_SIZE": "x", "PMIX_SIZE": "4"}, 4),
        ({}, None),
    ],
)
def test_world_size_sources_in_order(env: dict[str, str], expected: int | None) -> None:
    assert transport.world_size(env) == expected
