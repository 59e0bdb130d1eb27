"""How a virtual-node sim is shared among node hosts, and the plan a host runs."""

from __future__ import annotations

from pathlib import Path

from compute_domains.sim import agentconfig, hosts, topology
from compute_domains.sim.kubelet import config


def test_whole_racks_per_host_and_the_odd_nodes_with_the_first() -> None:
    shape = topology.Shape(racks=5, nodes_per_rack=2, plain_nodes=1)
    parts = hosts.share(shape, 0, 2)
    assert [len(p) for p in parts] == [4 + 1 + 1, 4, 2]
    assert topology.CONTROL_PLANE_NODE in parts[0]
    assert {"gb200-r2-n00", "gb200-r3-n01"} <= parts[1]
    assert parts[2] == {"gb200-r4-n00", "gb200-r4-n01"}
    every = [n for p in parts for n in p]
    assert sorted(every) == sorted(s.name for s in topology.all_nodes(shape))


def test_hosts_only_for_virtual_nodes_and_by_default_only_above_eight_racks() -> None:
    small, large = topology.Shape(racks=8), topology.Shape(racks=64)
    assert hosts.racks_per_host(large, None, virtual=False) is None
    assert hosts.racks_per_host(small, None, virtual=True) is None
    assert hosts.racks_per_host(large, None, virtual=True) == hosts.DEFAULT_RACKS_PER_HOST
    assert hosts.racks_per_host(small, 1, virtual=True) == 1
    assert hosts.racks_per_host(topology.Shape(racks=0, plain_nodes=3), 1, virtual=True) is None


def test_a_plan_round_trips_less_its_programs() -> None:
    settings = agentconfig.AgentSettings(
        shape=topology.Shape(racks=2, nodes_per_rack=3, fabric_faults=(("gb200-r0-n01", "error"),)),
        sim_root=Path("/s"),
        pki_dir=Path("/s/pki"),
        api_server="https://127.0.0.1:6443",
        isolate=True,
        nvml_lib_dir=Path("/s/lib"),
        stand_in_bin=None,
        image_map={"nvcr.io/nvidia/k8s-dra-driver-gpu": Path("/img")},
        address_slot=3,
        releases={"v0.1.0": Path("/r/bin")},
        kubelet=config.KubeletSettings(lease_renew_s=10.0),
        virtual_nodes=True,
        nodes=frozenset({"gb200-r1-n00", "gb200-r1-n02"}),
        dranet=True,
    )
    assert hosts.settings_from_plan(hosts.plan_json(settings), None) == settings
