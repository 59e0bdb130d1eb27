"""The NICs of a simulated GB200 A4X node, as DRANET v1.3.0 discovers and publishes them.

An A4X VM (``a4x-highgpu-4g``) has two gVNICs and four ConnectX-7 RDMA NICs (GCE's ``MRDMA``
NIC type, one RDMA subnet each; guide §2.2). DRANET publishes every PCI network device but the
default-route uplink (``eth0``), named after its PCI address (``pci-<domain>-<bus>-<dev>-<fn>``),
with the attributes its inventory reads from sysfs and netlink (``dra.net/ifName``,
``dra.net/pciAddress``, ``dra.net/rdma``, ...), the standard ``resource.kubernetes.io/pcieRoot``
and, on GCE, ``gce.dra.net/*``. For a RoCE NIC (a netdev with an RDMA link) v1.3.0 does not
publish ``dra.net/rdmaDevice`` (only IB-only devices get it); the stand-in keeps that.

Modelled values (docs/simulator.md says which): interface names ``gpu<N>rdma0`` (GCE's names
for the RDMA NICs, as DRANET's GKE examples show), RDMA links ``mlx5_<N>``, PCI domains of a
GB200 compute tray's CX-7s, MTU 8896 (GCE's RDMA VPC), GCE's MACs (``42:01`` + IPv4), addresses
``10.<N>.<node>/32`` on the guide's per-NIC RDMA subnets.

``layout`` writes the node's host-side view under the node root: ``sys/class/net/<ifName>``
(``address``, ``mtu``, ``operstate``, ``device/infiniband/<mlx5_N>``), ``sys/class/infiniband``
and the RDMA character devices ``dev/infiniband/uverbs<N>`` and ``rdma_cm`` (root only).
"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path
from typing import Any

from compute_domains.sim import topology
from compute_domains.sim.kubelet import nri

DRIVER = "dra.net"
"""DRANET's driver name (its attribute domain too)."""
MACHINE_TYPE = "a4x-highgpu-4g"
"""The guide's machine type (``gce.dra.net/machineType``)."""
RDMA_NETWORK = "forrest-rdma-net-us-east1-d"
"""The guide's RDMA VPC (``RDMA_NET``), published as ``gce.dra.net/networkName``."""
GVNIC_NETWORK = "gke-hzchen-a4x-poc-gvnic-net-1"
"""The guide's second gVNIC network (``GVNIC_NET_1``)."""
UVERBS_MAJOR = 231
"""``/dev/infiniband/uverbs<N>``: major 231, minor 192 + N (the kernel's ib_uverbs)."""
UVERBS_MINOR_BASE = 192
RDMA_CM = (10, 58)
"""``/dev/infiniband/rdma_cm``: a misc device (major 10); its minor is given at boot."""
RDMA_NICS = 4
"""RDMA NICs of an A4X node."""
_NIC_PCI = ("0000:03:00.0", "0002:03:00.0", "0010:03:00.0", "0012:03:00.0")
"""PCI addresses of the four CX-7s (two per Grace socket, NUMA 0 and 1)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Nic:
    """One network device of a node, as DRANET's inventory sees it."""

    pci_address: str
    if_name: str
    rdma_link: str
    """RDMA link device (``mlx5_<N>``); empty for a NIC without RDMA."""
    mac: str
    ipv4: str
    """Global address with prefix (``10.0.3.2/32``)."""
    mtu: int
    numa_node: int
    vendor: str
    product: str
    network: str

    @property
    def device_name(self) -> str:
        """DRANET's device name: the normalised PCI address (``pci-0000-03-00-0``)."""
        return "pci-" + self.pci_address.replace(":", "-").replace(".", "-")

    @property
    def pcie_root(self) -> str:
        """``resource.kubernetes.io/pcieRoot`` (the root complex of the PCI domain)."""
        return f"pci{self.pci_address.split(':', 1)[0]}:00"

    @property
    def uverbs(self) -> str:
        """The NIC's verbs character device (``/dev/infiniband/uverbs<N>``); empty without RDMA."""
        if not self.rdma_link:
            return ""
        return f"/dev/infiniband/uverbs{self.rdma_link.rsplit('_', 1)[1]}"


def _mac(ipv4: str) -> str:
    # GCE derives a NIC's MAC from its primary address: 42:01 + the four octets.
    octets = [int(o) for o in ipv4.split("/", 1)[0].split(".")]
    return "42:01:" + ":".join(f"{o:02x}" for o in octets)


def nics(spec: topology.NodeSpec) -> list[Nic]:
    """The network devices DRANET publishes on ``spec``'s node (none on a node without GPUs)."""
    if not spec.gpus:
        return []
    n = spec.ordinal
    host = f"{n // 250}.{n % 250 + 2}"
    out = [
        Nic(
            pci_address="0000:00:05.0",
            if_name="eth1",
            rdma_link="",
            mac=_mac(f"10.129.{host}"),
            ipv4=f"10.129.{host}/32",
            mtu=8896,
            numa_node=0,
            vendor="Google, Inc.",
            product="Compute Engine Virtual Ethernet [gVNIC]",
            network=GVNIC_NETWORK,
        )
    ]
    for i in range(RDMA_NICS):
        ip = f"10.{i}.{host}"
        out.append(
            Nic(
                pci_address=_NIC_PCI[i],
                if_name=f"gpu{i}rdma0",
                rdma_link=f"mlx5_{i}",
                mac=_mac(ip),
                ipv4=f"{ip}/32",
                mtu=8896,
                numa_node=i // 2,
                vendor="Mellanox Technologies",
                product="MT2910 Family [ConnectX-7]",
                network=RDMA_NETWORK,
            )
        )
    return out


def _s(value: str) -> dict[str, str]:
    return {"string": value}


def device(nic: Nic) -> dict[str, Any]:
    """One ResourceSlice device (``resource.k8s.io/v1``) as DRANET v1.3.0 publishes it."""
    p = DRIVER + "/"
    attrs: dict[str, dict[str, Any]] = {
        p + "alias": _s(""),
        p + "ebpf": {"bool": False},
        p + "encapsulation": _s("ether"),
        p + "ifName": _s(nic.if_name),
        p + "ipv4": _s(nic.ipv4),
        p + "mac": _s(nic.mac),
        p + "mtu": {"int": nic.mtu},
        p + "numaNode": {"int": nic.numa_node},
        p + "pciAddress": _s(nic.pci_address),
        p + "pciDevice": _s(nic.product),
        p + "pciVendor": _s(nic.vendor),
        p + "rdma": {"bool": bool(nic.rdma_link)},
        p + "sriov": {"bool": False},
        p + "state": _s("up"),
        p + "type": _s("device"),
        p + "virtual": {"bool": False},
        "resource.kubernetes.io/pcieRoot": _s(nic.pcie_root),
        "gce.dra.net/machineType": _s(MACHINE_TYPE),
        "gce.dra.net/networkName": _s(nic.network),
    }
    return {"name": nic.device_name, "attributes": attrs}


def slice_devices(spec: topology.NodeSpec) -> list[dict[str, Any]]:
    """The node's devices, sorted by name as DRANET sorts them."""
    return sorted((device(n) for n in nics(spec)), key=lambda d: str(d["name"]))


def char_devices(nic: Nic) -> dict[str, tuple[int, int]]:
    """Host path → (major, minor) of the RDMA character devices a pod gets with ``nic``."""
    if not nic.rdma_link:
        return {}
    index = int(nic.rdma_link.rsplit("_", 1)[1])
    return {
        "/dev/infiniband/rdma_cm": RDMA_CM,
        nic.uverbs: (UVERBS_MAJOR, UVERBS_MINOR_BASE + index),
    }


def write_netdev(folder: Path, nic: Nic) -> None:
    """A netdev's sysfs stand-in at ``folder`` (``/sys/class/net/<ifName>``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "address").write_text(nic.mac + "\n")
    (folder / "mtu").write_text(f"{nic.mtu}\n")
    (folder / "operstate").write_text("up\n")
    if nic.rdma_link:
        (folder / "device/infiniband" / nic.rdma_link).mkdir(parents=True, exist_ok=True)


def _mknod(path: Path, major: int, minor: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    want = os.makedev(major, minor)
    try:
        st = path.lstat()
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == want:
            return
        path.unlink()
    os.mknod(path, stat.S_IFCHR | 0o666, want)
    path.chmod(0o666)


def layout(node_root: Path, node_nics: list[Nic]) -> None:
    """Write the node's host-side view of its NICs (blocking; device nodes only as root).

    A NIC whose netdev is in a pod (DRANET moved it) is left there: the host view is
    rebuilt only for NICs not in any pod's network view.
    """
    if not node_nics:
        return
    net = node_root / "sys/class/net"
    moved = {p.name for p in (node_root / nri.NETNS_DIR).glob("*/*") if p.is_dir()}
    for nic in node_nics:
        if nic.if_name not in moved:
            write_netdev(net / nic.if_name, nic)
        if nic.rdma_link:
            (node_root / "sys/class/infiniband" / nic.rdma_link).mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                for path, (major, minor) in char_devices(nic).items():
                    _mknod(node_root / path.lstrip("/"), major, minor)
