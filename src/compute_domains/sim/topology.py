"""The shape of a simulated cluster: racks of GB200 nodes, their NVLink domains and addresses.

Each rack is one NVLink domain (an NVL72 rack of 18 nodes x 4 GPUs in the seeds): its nodes share
a cluster UUID and a clique id, so their ``nvidia.com/gpu.clique`` label is the same. Addresses
are loopback addresses derived from the node's position, so they are stable across restarts and
never collide between nodes nor between sims running side by side: a sim holds an address
slot *s* (0..15, see ``sim.slots``); its node *n* is ``127.<1 + s>.<n // 250>.<n % 250 + 1>`` and
the node's pods draw from ``127.<64 + 4s + n // 256>.<n % 256>.2-254`` (253 addresses) for the
first 1,024 nodes and from half a /24 each for the next 4,096: node ``n = 1024 + k`` has
``127.<128 + 8s + k // 512>.<(k % 512) // 2>.<128 (k % 2) + 2 .. + 126>`` (125 addresses,
more than the kubelet's default of 110 pods; never .255, so never 127.255.255.255). A shape of
up to 5,000 GPU nodes (256 racks of 18 = 4,608, issue 28, and the control-plane node after
them) fits, and a shape of at most 1,023 nodes has the addresses it always had. ``nodes``
yields the GPU nodes, ``all_nodes`` every node the sim runs, the control-plane node included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from compute_domains.sim.nvml import config as nvml_config
from compute_domains.sim.nvml import profiles

FabricState = str
"""``completed`` | ``in-progress`` | ``error`` | ``not-supported`` (see ``NodeSpec.fabric``)."""

_PLAIN_RACK_BASE = 1000
"""Identity seed for nodes without a rack (their GPUs still need stable UUIDs)."""
_MAX_NODES = 5000
"""GPU nodes a shape may have: 1,024 + 4,096 pod ranges per slot, one left for the control plane."""
_LOW_POD_RANGES = 1024
"""Nodes whose pods use the first plan (127.64-127.127; unchanged since it held 1,000 nodes)."""
_LOW_POD_SLOTS = 253
"""Pod addresses of a node in the first plan (.2-.254 of its own /24)."""
_HIGH_POD_SLOTS = 125
"""Pod addresses of a node in the second plan (half a /24: .2-.126 or .130-.254)."""
SLOTS = 16
"""Address slots: how many sims can run side by side without sharing an address."""
CONTROL_PLANE_NODE = "control-plane"
"""Name of the simulated cluster's control-plane node (``all_nodes``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Shape:
    """What ``cdctl sim up`` builds: racks x nodes x GPUs, plus optional odd nodes."""

    racks: int = 2
    """Number of NVL72-like racks (one NVLink domain each)."""
    nodes_per_rack: int = 18
    """Nodes in every rack (18 in an NVL72)."""
    gpus_per_node: int = 4
    """GPUs per node (4 on GB200 A4X)."""
    plain_nodes: int = 0
    """Extra GPU nodes without multi-node NVLink (all-zero cluster UUID, like an H200 host)."""
    fabric_faults: tuple[tuple[str, FabricState], ...] = ()
    """(node name, fabric state) pairs that override a rack node's healthy fabric."""
    control_plane: bool = True
    """Run a control-plane node too (no GPUs, tainted ``NoSchedule``) whenever there are GPU
    nodes, as a kubeadm cluster has one: NVIDIA's controller asks for it by affinity."""

    def __post_init__(self) -> None:
        if self.racks < 0 or self.nodes_per_rack < 1 or self.gpus_per_node < 1:
            raise ValueError("racks must be >= 0, nodes per rack and GPUs per node >= 1")
        if self.total_nodes > _MAX_NODES:
            raise ValueError(f"at most {_MAX_NODES} nodes fit the loopback address plan")

    @property
    def total_nodes(self) -> int:
        """Every node of the shape."""
        return self.racks * self.nodes_per_rack + self.plain_nodes


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GpuSpec:
    """One GPU of a simulated node."""

    index: int
    uuid: str
    pci_bus_id: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeSpec:
    """One simulated node and everything derived from its position."""

    name: str
    ordinal: int
    slot: int = 0
    """Address slot of the sim this node belongs to (keeps side-by-side sims apart)."""
    """Position in the cluster (0-based); decides the addresses."""
    rack: int | None
    """Rack number, None for a node without multi-node NVLink."""
    cluster_uuid: str
    """NVLink domain's cluster UUID; all zeros for a node without MNNVL."""
    clique_id: int
    fabric: FabricState
    gpus: tuple[GpuSpec, ...]
    control_plane: bool = False
    """The cluster's control-plane node: labelled and tainted as kubeadm marks one, no GPUs."""

    @property
    def address(self) -> str:
        """The node's InternalIP (a loopback address of its own)."""
        n = self.ordinal
        return f"127.{1 + self.slot}.{n // 250}.{n % 250 + 1}"

    @property
    def clique(self) -> str:
        """``<clusterUUID>.<cliqueId>``; empty without MNNVL or without a completed fabric."""
        if self.rack is None or self.fabric != "completed":
            return ""
        return f"{self.cluster_uuid}.{self.clique_id}"

    @property
    def pod_slots(self) -> int:
        """How many pod addresses this node has (``pod_address`` takes 0 .. this - 1)."""
        return _LOW_POD_SLOTS if self.ordinal < _LOW_POD_RANGES else _HIGH_POD_SLOTS

    def pod_address(self, slot: int) -> str:
        """The ``slot``-th pod address of this node (slot in 0 .. ``pod_slots`` - 1)."""
        if not 0 <= slot < self.pod_slots:
            raise ValueError(f"pod address slot out of range 0..{self.pod_slots - 1}")
        n = self.ordinal
        if n < _LOW_POD_RANGES:
            return f"127.{64 + 4 * self.slot + n // 256}.{n % 256}.{slot + 2}"
        high = n - _LOW_POD_RANGES
        half = 128 * (high % 2)
        return f"127.{128 + 8 * self.slot + high // 512}.{(high % 512) // 2}.{half + slot + 2}"


def node_name(rack: int | None, index: int) -> str:
    """Stable node names: ``gb200-r<rack>-n<index>``, ``gpu-plain-<index>`` without a rack."""
    return f"gb200-r{rack}-n{index:02d}" if rack is not None else f"gpu-plain-{index:02d}"


def nodes(shape: Shape, slot: int = 0) -> Iterator[NodeSpec]:
    """Every node of the shape, racks first, in a stable order, in address slot ``slot``."""
    if not 0 <= slot < SLOTS:
        raise ValueError(f"address slot must be in 0..{SLOTS - 1}")
    faults = dict(shape.fabric_faults)
    ordinal = 0
    for rack in range(shape.racks):
        for i in range(shape.nodes_per_rack):
            name = node_name(rack, i)
            yield NodeSpec(
                name=name,
                ordinal=ordinal,
                slot=slot,
                rack=rack,
                cluster_uuid=profiles.cluster_uuid(rack),
                clique_id=profiles.DEFAULT_CLIQUE_ID,
                fabric=faults.get(name, "completed"),
                gpus=_gpus(rack, i, shape.gpus_per_node),
            )
            ordinal += 1
    for i in range(shape.plain_nodes):
        name = node_name(None, i)
        yield NodeSpec(
            name=name,
            ordinal=ordinal,
            slot=slot,
            rack=None,
            cluster_uuid=nvml_config.ZERO_CLUSTER_UUID,
            clique_id=0,
            fabric="completed",
            gpus=_gpus(_PLAIN_RACK_BASE, ordinal, shape.gpus_per_node),
        )
        ordinal += 1


def all_nodes(shape: Shape, slot: int = 0) -> Iterator[NodeSpec]:
    """Every node the sim runs: the shape's GPU nodes (``nodes``), then its control-plane node.

    The control-plane node takes the next ordinal, so the GPU nodes keep their addresses.
    """
    yield from nodes(shape, slot)
    if shape.control_plane and shape.total_nodes:
        yield NodeSpec(
            name=CONTROL_PLANE_NODE,
            ordinal=shape.total_nodes,
            slot=slot,
            rack=None,
            cluster_uuid=nvml_config.ZERO_CLUSTER_UUID,
            clique_id=0,
            fabric="not-supported",
            gpus=(),
            control_plane=True,
        )


def _gpus(rack: int, node: int, count: int) -> tuple[GpuSpec, ...]:
    # GB200 A4X hosts expose their GPUs on distinct PCI domains; any stable, unique id works.
    return tuple(
        GpuSpec(
            index=g,
            uuid=profiles.gpu_uuid(rack, node, g),
            pci_bus_id=f"0000:{0x10 + g * 8:02x}:00.0",
        )
        for g in range(count)
    )


def nvml_for(spec: NodeSpec) -> nvml_config.NodeNvmlConfig:
    """What the node's NVML stand-in answers (same identities as the node's labels)."""
    count = len(spec.gpus)
    if spec.rack is None:
        return profiles.h200(_PLAIN_RACK_BASE, spec.ordinal, gpus=count)
    index = int(spec.name.rsplit("-n", 1)[1])
    if spec.fabric == "in-progress":
        return profiles.fabric_in_progress(spec.rack, index, gpus=count)
    if spec.fabric == "error":
        return profiles.fabric_error(spec.rack, index, gpus=count)
    if spec.fabric == "not-supported":
        return profiles.no_fabric(spec.rack, index, gpus=count)
    return profiles.gb200(
        spec.rack, index, gpus=count, clique_id=spec.clique_id, cluster=spec.cluster_uuid
    )
