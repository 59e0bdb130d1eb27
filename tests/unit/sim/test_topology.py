"""The sim's nodes: GPU nodes of the shape, plus a control-plane node that shifts none of them."""

from __future__ import annotations

import pytest

from compute_domains.sim import topology


def test_the_control_plane_node_comes_last_and_leaves_gpu_addresses_alone() -> None:
    shape = topology.Shape(racks=1, nodes_per_rack=2, plain_nodes=1)
    gpu = list(topology.nodes(shape, slot=3))
    every = list(topology.all_nodes(shape, slot=3))
    assert every[:-1] == gpu
    cp = every[-1]
    assert (cp.name, cp.control_plane, cp.gpus, cp.clique) == ("control-plane", True, (), "")
    assert not any(n.control_plane for n in gpu)
    addresses = [n.address for n in every] + [n.pod_address(0) for n in every]
    assert len(set(addresses)) == len(addresses)


def test_no_control_plane_node_without_gpu_nodes_or_when_turned_off() -> None:
    """A bare control plane (integration tests of the controller) runs no node at all."""
    assert list(topology.all_nodes(topology.Shape(racks=0))) == []
    shape = topology.Shape(racks=1, nodes_per_rack=1, control_plane=False)
    assert [n.name for n in topology.all_nodes(shape)] == ["gb200-r0-n00"]


def test_the_largest_shape_keeps_the_control_plane_node_in_its_own_address_range() -> None:
    shape = topology.Shape(racks=0, plain_nodes=1000)
    cp = list(topology.all_nodes(shape, slot=15))[-1]
    assert cp.address == "127.16.4.1"
    assert cp.pod_address(252) == "127.127.232.254"  # slot 15's last pod range, still ours


def test_1152_nodes_in_every_slot_have_unique_addresses_apart_from_every_other_slot() -> None:
    """Issue 15's 64 racks: node and pod addresses unique within a sim and across all 16 slots."""
    shape = topology.Shape(racks=64)
    seen: set[str] = set()
    count = 0
    for slot in range(topology.SLOTS):
        for spec in topology.all_nodes(shape, slot=slot):
            octets = [spec.address, spec.pod_address(0), spec.pod_address(spec.pod_slots - 1)]
            for address in octets:
                parts = [int(p) for p in address.split(".")]
                assert parts[0] == 127 and all(0 <= p <= 255 for p in parts), address
            seen.update(octets)
            count += 3
    assert count == 16 * 1153 * 3
    assert len(seen) == count


def test_the_largest_shape_fits_and_one_more_node_is_refused() -> None:
    shape = topology.Shape(racks=0, plain_nodes=5000)
    every = list(topology.all_nodes(shape, slot=15))
    last = every[-1]  # the control-plane node, 5,001st: k = 3,976 of the second plan
    assert last.pod_slots == 125
    assert last.pod_address(124) == "127.255.196.126"
    with pytest.raises(ValueError, match=r"out of range 0\.\.124"):
        last.pod_address(125)
    assert len({n.pod_address(0) for n in every}) == 5001
    with pytest.raises(ValueError, match="at most 5000 nodes"):
        topology.Shape(racks=0, plain_nodes=5001)


def test_256_racks_in_every_slot_have_unique_addresses_never_a_broadcast() -> None:
    """Issue 28's 4,608 nodes: first and last pod address of every node, unique across all 16
    slots; every pod address of the last slot (the plan.s edge)."""
    shape = topology.Shape(racks=256)
    seen: set[str] = set()
    count = 0
    for slot in (0, 1, topology.SLOTS - 2, topology.SLOTS - 1):
        for spec in topology.all_nodes(shape, slot=slot):
            edge = slot == topology.SLOTS - 1 and spec.ordinal in (1023, 1024, 1025, 4607, 4608)
            picks = range(spec.pod_slots) if edge else (0, spec.pod_slots - 1)
            addresses = [spec.address] + [spec.pod_address(i) for i in picks]
            for address in addresses:
                parts = [int(p) for p in address.split(".")]
                assert parts[0] == 127 and all(0 <= p <= 255 for p in parts), address
                assert parts[3] not in (0, 255), address
            seen.update(addresses)
            count += len(addresses)
    assert len(seen) == count


def test_shapes_of_up_to_1023_nodes_keep_their_addresses() -> None:
    """The plan before 1,024 nodes, written out: existing sims, docs and results stay valid."""
    shape = topology.Shape(racks=56, plain_nodes=15)  # 1,023 GPU nodes, control plane 1,024th
    for slot in (0, 7, 15):
        for spec in topology.all_nodes(shape, slot=slot):
            n = spec.ordinal
            assert spec.address == f"127.{1 + slot}.{n // 250}.{n % 250 + 1}"
            assert spec.pod_address(5) == f"127.{64 + 4 * slot + n // 256}.{n % 256}.7"
