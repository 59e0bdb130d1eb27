"""What one simulated node's NVML answers, and the file the mock library reads it from.

``NodeNvmlConfig`` describes a node: driver and CUDA versions, its GPUs (``GpuSpec``) and the
fabric (multi-node NVLink) answer every GPU gives unless a GPU carries its own ``FabricInfo``.
``render`` turns it into the line-based format ``mocknvml.c`` parses at ``nvmlInit`` (its header
comment is the format's reference); ``write`` replaces a node's file atomically, so a process
initialising NVML never reads half a file. The library re-reads the file whenever its init count
goes from 0 to 1, so rewriting it (say fabric ``IN_PROGRESS`` → ``COMPLETED``) changes what the
next NVML session sees.

Invariants, checked at construction (``ConfigError`` otherwise): every string fits NVML's
buffers and holds no line break, GPU UUIDs and PCI bus IDs are unique within a node, UUIDs are
well formed, and a node has at most 64 GPUs. Numeric codes are NVML's own (``NvmlReturn``,
``FabricState``, ``Architecture``), so nvidia-ml-py raises the matching ``NVMLError`` subclass.

Size: about 300 lines for one role; the model, its invariants and the renderer of the one
format ``mocknvml.c`` parses change together, and split, a new field would touch three modules.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import uuid
from pathlib import Path

from compute_domains.infra import atomicfile, errors

CONFIG_ENV = "MOCK_NVML_CONFIG"
"""Environment variable naming the config file (the name NVIDIA's mock NVML uses)."""
LIBRARY_NAME = "libnvidia-ml.so.1"
"""The soname nvidia-ml-py opens; the mock is built under exactly this name."""
FORMAT = 1
"""Version of the config format; the library rejects any other."""
MAX_GPUS = 64
ZERO_CLUSTER_UUID = "00000000-0000-0000-0000-000000000000"
"""Fabric-attached but not in a multi-node NVLink domain: no clique, not an error."""
HEALTH_MASK_HEALTHY = 0xAA
"""Fabric health mask with degraded-bandwidth, route-recovery, route-unhealthy and
access-timeout-recovery all reported FALSE (value 2 in each 2-bit field at shifts 0, 2, 4, 6)."""

_BUS_ID = re.compile(r"^(?:[0-9a-fA-F]{1,8}:)?[0-9a-fA-F]{1,2}:[01]?[0-9a-fA-F]\.[0-7]$")
_CUDA_VERSION = re.compile(r"^(\d{1,4})\.(\d{1,2})$")


class NvmlReturn(enum.IntEnum):
    """The ``nvmlReturn_t`` codes the simulator uses (NVML's numeric values)."""

    SUCCESS = 0
    UNINITIALIZED = 1
    INVALID_ARGUMENT = 2
    NOT_SUPPORTED = 3
    NO_PERMISSION = 4
    NOT_FOUND = 6
    INSUFFICIENT_SIZE = 7
    DRIVER_NOT_LOADED = 9
    TIMEOUT = 10
    LIBRARY_NOT_FOUND = 12
    GPU_IS_LOST = 15
    INSUFFICIENT_RESOURCES = 23
    ARGUMENT_VERSION_MISMATCH = 25
    NOT_READY = 27
    UNKNOWN = 999


class FabricState(enum.IntEnum):
    """``nvmlGpuFabricState_t``: how far the GPU's fabric registration got."""

    NOT_SUPPORTED = 0
    NOT_STARTED = 1
    IN_PROGRESS = 2
    COMPLETED = 3


class Architecture(enum.IntEnum):
    """``nvmlDeviceArchitecture_t`` values for the GPUs the profiles model."""

    AMPERE = 7
    HOPPER = 9
    BLACKWELL = 10
    UNKNOWN = 0xFFFFFFFF


class HealthSummary(enum.IntEnum):
    """``NVML_GPU_FABRIC_HEALTH_SUMMARY_*`` (fabric info struct version 3)."""

    NOT_SUPPORTED = 0
    HEALTHY = 1
    UNHEALTHY = 2
    LIMITED_CAPACITY = 3


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class FabricInfo:
    """One GPU's answer to ``nvmlDeviceGetGpuFabricInfo`` / ``nvmlDeviceGetGpuFabricInfoV``."""

    cluster_uuid: str = ZERO_CLUSTER_UUID
    """The NVLink domain's UUID; all zeros means no multi-node NVLink domain."""
    clique_id: int = 0
    """Fabric clique (partition) within the cluster, unsigned 32-bit."""
    state: FabricState = FabricState.NOT_SUPPORTED
    """Registration state; only ``COMPLETED`` makes ``status`` meaningful."""
    status: int = NvmlReturn.SUCCESS
    """The registration's outcome, an ``nvmlReturn_t``."""
    health_mask: int = 0
    """``healthMask`` of the versioned struct, unsigned 32-bit."""
    health_summary: int = HealthSummary.NOT_SUPPORTED
    """``healthSummary`` of the version-3 struct, 0..255."""
    call_return: int = NvmlReturn.SUCCESS
    """What the calls themselves return; ``NOT_SUPPORTED`` models a GPU without fabric."""

    def __post_init__(self) -> None:
        _check_uuid(self.cluster_uuid, "cluster_uuid")
        _check_range(self.clique_id, 0xFFFFFFFF, "clique_id")
        _check_range(self.state, 0xFF, "state")
        _check_range(self.status, 0xFFFFFFFF, "status")
        _check_range(self.health_mask, 0xFFFFFFFF, "health_mask")
        _check_range(self.health_summary, 0xFF, "health_summary")
        _check_range(self.call_return, 0xFFFFFFFF, "call_return")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GpuSpec:
    """One GPU as NVML reports it; its position in ``NodeNvmlConfig.gpus`` is its index."""

    uuid: str
    """``GPU-`` followed by a canonical UUID, unique within the node."""
    pci_bus_id: str
    """``domain:bus:device.function`` in hex, e.g. ``00000008:01:00.0``; unique within the node."""
    name: str
    """Product name, e.g. ``NVIDIA GB200``."""
    architecture: Architecture = Architecture.UNKNOWN
    compute_capability: tuple[int, int] = (0, 0)
    memory_total_bytes: int = 0
    memory_used_bytes: int = 0
    minor: int | None = None
    """Device minor number (``/dev/nvidiaN``); None means the GPU's index."""
    pci_device_id: int = 0
    """``(device id << 16) | vendor id``, e.g. ``0x294110DE``."""
    pci_subsystem_id: int = 0
    fabric: FabricInfo | None = None
    """This GPU's own fabric answer; None means the node's."""

    def __post_init__(self) -> None:
        if not self.uuid.startswith("GPU-"):
            raise errors.ConfigError(f"GPU uuid {self.uuid!r} must start with 'GPU-'")
        _check_uuid(self.uuid.removeprefix("GPU-"), "GPU uuid", canonical=True)
        if not _BUS_ID.match(self.pci_bus_id):
            raise errors.ConfigError(f"PCI bus id {self.pci_bus_id!r} is not domain:bus:dev.fn")
        _check_text(self.name, 96, "GPU name")
        if len(self.compute_capability) != 2:
            raise errors.ConfigError("compute_capability must be (major, minor)")
        for part in self.compute_capability:
            _check_range(part, 0xFFFFFFFF, "compute_capability")
        _check_range(self.memory_total_bytes, 2**64 - 1, "memory_total_bytes")
        _check_range(self.memory_used_bytes, self.memory_total_bytes, "memory_used_bytes")
        if self.minor is not None:
            _check_range(self.minor, 0xFFFFFFFF, "minor")
        _check_range(self.pci_device_id, 0xFFFFFFFF, "pci_device_id")
        _check_range(self.pci_subsystem_id, 0xFFFFFFFF, "pci_subsystem_id")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeNvmlConfig:
    """Everything one simulated node's NVML answers."""

    driver_version: str
    """``nvmlSystemGetDriverVersion``, e.g. ``580.95.05``."""
    cuda_version: str
    """``major.minor``; ``nvmlSystemGetCudaDriverVersion`` reports 1000*major + 10*minor."""
    gpus: tuple[GpuSpec, ...]
    """In index order; empty is a node whose NVML only starts with ``NVML_INIT_FLAG_NO_GPUS``."""
    cluster_uuid: str = ZERO_CLUSTER_UUID
    """The node's fabric answer, used by every GPU without its own ``fabric``."""
    clique_id: int = 0
    fabric_state: FabricState = FabricState.NOT_SUPPORTED
    fabric_status: int = NvmlReturn.SUCCESS
    fabric_health_mask: int = 0
    fabric_health_summary: int = HealthSummary.NOT_SUPPORTED
    fabric_return: int = NvmlReturn.SUCCESS
    """What the fabric-info calls return; ``NOT_SUPPORTED`` models GPUs without fabric."""
    init_return: int = NvmlReturn.SUCCESS
    """What ``nvmlInit*`` returns, e.g. ``DRIVER_NOT_LOADED`` for a node with a broken driver."""
    nvml_version: str | None = None
    """``nvmlSystemGetNVMLVersion``; None means ``<cuda major>.<driver_version>``."""

    def __post_init__(self) -> None:
        _check_text(self.driver_version, 64, "driver_version")
        if not _CUDA_VERSION.match(self.cuda_version):
            raise errors.ConfigError(f"cuda_version {self.cuda_version!r} is not 'major.minor'")
        if self.nvml_version is not None:
            _check_text(self.nvml_version, 80, "nvml_version")
        _check_range(self.init_return, 0xFFFFFFFF, "init_return")
        if len(self.gpus) > MAX_GPUS:
            raise errors.ConfigError(f"{len(self.gpus)} GPUs; the mock holds at most {MAX_GPUS}")
        if len({g.uuid for g in self.gpus}) != len(self.gpus):
            raise errors.ConfigError("GPU uuids repeat within one node")
        if len({_bus_key(g.pci_bus_id) for g in self.gpus}) != len(self.gpus):
            raise errors.ConfigError("GPU PCI bus ids repeat within one node")
        self.fabric_for(None)  # validates the node-level fabric fields

    @property
    def cuda_driver_version(self) -> int:
        """The integer ``nvmlSystemGetCudaDriverVersion`` returns (13.0 → 13000)."""
        major, minor = self.cuda_version.split(".")
        return 1000 * int(major) + 10 * int(minor)

    @property
    def effective_nvml_version(self) -> str:
        """The NVML version string the library reports."""
        return self.nvml_version or f"{self.cuda_version.split('.')[0]}.{self.driver_version}"

    def fabric_for(self, gpu: GpuSpec | None) -> FabricInfo:
        """The fabric answer ``gpu`` gives (the node's unless it has its own)."""
        if gpu is not None and gpu.fabric is not None:
            return gpu.fabric
        return FabricInfo(
            cluster_uuid=self.cluster_uuid,
            clique_id=self.clique_id,
            state=self.fabric_state,
            status=self.fabric_status,
            health_mask=self.fabric_health_mask,
            health_summary=self.fabric_health_summary,
            call_return=self.fabric_return,
        )


def render(cfg: NodeNvmlConfig) -> str:
    """The config file text for ``cfg``; the same config always renders the same text."""
    lines = [
        "# mock NVML config (compute_domains.sim.nvml); format: see mocknvml.c",
        f"format={FORMAT}",
        f"driver_version={cfg.driver_version}",
        f"cuda_driver_version={cfg.cuda_driver_version}",
        f"nvml_version={cfg.effective_nvml_version}",
        f"init_return={int(cfg.init_return)}",
    ]
    for index, gpu in enumerate(cfg.gpus):
        fabric = cfg.fabric_for(gpu)
        major, minor = gpu.compute_capability
        lines += [
            "",
            "[gpu]",
            f"uuid={gpu.uuid}",
            f"name={gpu.name}",
            f"pci_bus_id={gpu.pci_bus_id}",
            f"pci_device_id={gpu.pci_device_id:#010x}",
            f"pci_subsystem_id={gpu.pci_subsystem_id:#010x}",
            f"minor={index if gpu.minor is None else gpu.minor}",
            f"architecture={int(gpu.architecture)}",
            f"compute_capability={major}.{minor}",
            f"memory_total={gpu.memory_total_bytes}",
            f"memory_used={gpu.memory_used_bytes}",
            f"fabric_return={int(fabric.call_return)}",
            f"fabric_cluster_uuid={uuid.UUID(fabric.cluster_uuid)}",
            f"fabric_clique_id={fabric.clique_id}",
            f"fabric_state={int(fabric.state)}",
            f"fabric_status={int(fabric.status)}",
            f"fabric_health_mask={fabric.health_mask:#x}",
            f"fabric_health_summary={int(fabric.health_summary)}",
        ]
    return "\n".join(lines) + "\n"


def write(path: Path, cfg: NodeNvmlConfig) -> None:
    """Replace the config file at ``path`` atomically (readers see the old or the new one)."""
    atomicfile.write_atomic(path, render(cfg))


def process_env(lib_dir: Path, config_path: Path, *, ld_library_path: str = "") -> dict[str, str]:
    """The variables that make a process's nvidia-ml-py load the mock and read ``config_path``.

    Merge them into the child's environment; ``ld_library_path`` (the child's existing value,
    if any) is kept after ``lib_dir``.
    """
    search = str(lib_dir) if not ld_library_path else f"{lib_dir}:{ld_library_path}"
    return {"LD_LIBRARY_PATH": search, CONFIG_ENV: str(config_path)}


def _bus_key(bus_id: str) -> tuple[int, ...]:
    parts = re.split(r"[:.]", bus_id)
    if len(parts) == 3:
        parts.insert(0, "0")
    return tuple(int(p, 16) for p in parts)


def _check_uuid(value: str, what: str, *, canonical: bool = False) -> None:
    try:
        parsed = uuid.UUID(value)
    except ValueError as err:
        raise errors.ConfigError(f"{what} {value!r} is not a UUID") from err
    if canonical and str(parsed) != value:
        raise errors.ConfigError(f"{what} {value!r} is not lowercase 8-4-4-4-12")


def _check_range(value: int, high: int, what: str) -> None:
    if not 0 <= value <= high:
        raise errors.ConfigError(f"{what}={value} is outside 0..{high}")


def _check_text(value: str, size: int, what: str) -> None:
    if (
        not value
        or len(value.encode()) >= size
        or value != value.strip()
        or not value.isprintable()
    ):
        raise errors.ConfigError(f"{what} {value!r}: 1..{size - 1} printable bytes, not padded")
