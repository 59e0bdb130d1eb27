"""The sim's nodes: GPU nodes of the shape, plus a control-plane node that shifts none of them."""

from __future__ import annotations

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
