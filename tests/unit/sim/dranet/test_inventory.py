"""What DRANET's stand-in publishes for a GB200 node, and the host view it lays out."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from compute_domains.sim import topology
from compute_domains.sim.dranet import inventory

SHAPE = topology.Shape(racks=1, nodes_per_rack=2, gpus_per_node=4)


def _node(name: str = "gb200-r0-n00", shape: topology.Shape = SHAPE) -> topology.NodeSpec:
    return next(s for s in topology.all_nodes(shape) if s.name == name)


def _guide_selects(device: dict[str, object], driver: str = "dra.net") -> bool:
    """The guide's DeviceClass expression (§3.4), over the slice's attribute map:
    ``device.driver == "dra.net" && has(device.attributes["dra.net"].rdma) &&
    device.attributes["dra.net"].rdma == true`` (an attribute ``dra.net/rdma`` is
    ``device.attributes["dra.net"].rdma`` in CEL)."""
    attrs = device["attributes"]
    assert isinstance(attrs, dict)
    rdma = attrs.get("dra.net/rdma")
    return driver == "dra.net" and rdma is not None and rdma.get("bool") is True


def test_a_gb200_node_publishes_its_second_gvnic_and_four_rdma_nics_by_pci_name() -> None:
    devices = inventory.slice_devices(_node())
    assert [d["name"] for d in devices] == [
        "pci-0000-00-05-0",
        "pci-0000-03-00-0",
        "pci-0002-03-00-0",
        "pci-0010-03-00-0",
        "pci-0012-03-00-0",
    ]
    first = devices[1]["attributes"]
    assert first == {
        "dra.net/alias": {"string": ""},
        "dra.net/ebpf": {"bool": False},
        "dra.net/encapsulation": {"string": "ether"},
        "dra.net/ifName": {"string": "gpu0rdma0"},
        "dra.net/ipv4": {"string": "10.0.0.2/32"},
        "dra.net/mac": {"string": "42:01:0a:00:00:02"},
        "dra.net/mtu": {"int": 8896},
        "dra.net/numaNode": {"int": 0},
        "dra.net/pciAddress": {"string": "0000:03:00.0"},
        "dra.net/pciDevice": {"string": "MT2910 Family [ConnectX-7]"},
        "dra.net/pciVendor": {"string": "Mellanox Technologies"},
        "dra.net/rdma": {"bool": True},
        "dra.net/sriov": {"bool": False},
        "dra.net/state": {"string": "up"},
        "dra.net/type": {"string": "device"},
        "dra.net/virtual": {"bool": False},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        "gce.dra.net/machineType": {"string": "a4x-highgpu-4g"},
        "gce.dra.net/networkName": {"string": "forrest-rdma-net-us-east1-d"},
    }
    # v1.3.0 publishes rdmaDevice only for IB-only devices (no netdev): a RoCE NIC has none.
    assert all("dra.net/rdmaDevice" not in d["attributes"] for d in devices)


def test_the_guides_device_class_selects_exactly_the_four_rdma_nics() -> None:
    devices = inventory.slice_devices(_node())
    chosen = [d["attributes"]["dra.net/ifName"]["string"] for d in devices if _guide_selects(d)]
    assert chosen == ["gpu0rdma0", "gpu1rdma0", "gpu2rdma0", "gpu3rdma0"]
    links = [n.rdma_link for n in inventory.nics(_node()) if n.rdma_link]
    assert links == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    numa = [d["attributes"]["dra.net/numaNode"]["int"] for d in devices if _guide_selects(d)]
    assert numa == [0, 0, 1, 1]


def test_nodes_without_gpus_publish_nothing() -> None:
    assert inventory.nics(_node("control-plane")) == []
    assert inventory.slice_devices(_node("control-plane")) == []


def test_addresses_and_macs_are_unique_over_1152_nodes() -> None:
    shape = topology.Shape(racks=64)
    ips: set[str] = set()
    macs: set[str] = set()
    count = 0
    for spec in topology.nodes(shape):
        for nic in inventory.nics(spec):
            ips.add(nic.ipv4)
            macs.add(nic.mac)
            count += 1
    assert count == 1152 * 5
    assert len(ips) == len(macs) == count


def test_char_devices_are_rdma_cm_and_the_nics_uverbs() -> None:
    nic = inventory.nics(_node())[3]
    assert nic.if_name == "gpu2rdma0"
    assert inventory.char_devices(nic) == {
        "/dev/infiniband/rdma_cm": (10, 58),
        "/dev/infiniband/uverbs2": (231, 194),
    }
    assert inventory.char_devices(inventory.nics(_node())[0]) == {}  # the gVNIC


def test_layout_writes_the_host_view_and_keeps_a_nic_moved_into_a_pod(tmp_path: Path) -> None:
    nics = inventory.nics(_node())
    moved = tmp_path / "var/run/netns/pod-1/gpu1rdma0"
    moved.mkdir(parents=True)
    inventory.layout(tmp_path, nics)
    net = tmp_path / "sys/class/net"
    assert sorted(p.name for p in net.iterdir()) == ["eth1", "gpu0rdma0", "gpu2rdma0", "gpu3rdma0"]
    assert (net / "gpu0rdma0/address").read_text() == "42:01:0a:00:00:02\n"
    assert (net / "gpu0rdma0/device/infiniband/mlx5_0").is_dir()
    infiniband = sorted(p.name for p in (tmp_path / "sys/class/infiniband").iterdir())
    assert infiniband == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    if os.geteuid() != 0:
        pytest.skip("device nodes need root")
    st = (tmp_path / "dev/infiniband/uverbs3").stat()
    assert stat.S_ISCHR(st.st_mode)
    assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (231, 195)
