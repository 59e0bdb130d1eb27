"""Ready-made simulated nodes, with every identity derived from (rack, node, gpu).

The same (rack, node, gpu) always yields the same GPU UUID and the same rack always yields the
same cluster UUID (UUIDv5 under a fixed namespace), so a restarted simulation, a test and a
demo agree on identities without storing them. Profiles:

- ``GB200``: a GB200 NVL72 compute tray, 4 Blackwell GPUs, fabric ``COMPLETED`` with the rack's
  cluster UUID and a clique ID: the multi-node NVLink case.
- ``H200``: an HGX H200 node, single-node NVLink only: fabric ``COMPLETED``, status success,
  cluster UUID all zeros and clique 0, as measured on real H200s (shared/hardware/h200.md).
- ``FABRIC_IN_PROGRESS``: GB200 whose fabric registration has not finished (no UUID yet).
- ``FABRIC_ERROR``: GB200 whose registration completed with a failure status.
- ``NO_FABRIC``: a pre-Hopper node (A100) whose fabric-info calls return ``NOT_SUPPORTED``.

Hardware figures (names, memory, PCI IDs) are plausible stand-ins for the simulator, not a
source of truth for real-hardware code.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import uuid

from compute_domains.sim.nvml import config

DEFAULT_DRIVER_VERSION = "580.95.05"
DEFAULT_CUDA_VERSION = "13.0"
DEFAULT_CLIQUE_ID = 1

_NAMESPACE = uuid.UUID("3d6f0c8e-5b2a-4c1e-9f47-1a2b3c4d5e6f")
"""Fixed UUIDv5 namespace of the simulator; changing it changes every simulated identity."""
_MIB = 1 << 20


class Profile(enum.StrEnum):
    """The node kinds ``for_profile`` builds."""

    GB200 = "gb200"
    H200 = "h200"
    FABRIC_IN_PROGRESS = "fabric-in-progress"
    FABRIC_ERROR = "fabric-error"
    NO_FABRIC = "no-fabric"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Model:
    name: str
    architecture: config.Architecture
    compute_capability: tuple[int, int]
    memory_mib: int
    pci_device_id: int
    bus_ids: tuple[str, ...]
    default_gpus: int

    def bus_id(self, index: int) -> str:
        if index < len(self.bus_ids):
            return self.bus_ids[index]
        return f"{0x1000 + index:08X}:01:00.0"


_GB200 = _Model(
    name="NVIDIA GB200",
    architecture=config.Architecture.BLACKWELL,
    compute_capability=(10, 0),
    memory_mib=189471,
    pci_device_id=0x294110DE,
    bus_ids=("00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0"),
    default_gpus=4,
)
_H200 = _Model(
    name="NVIDIA H200",
    architecture=config.Architecture.HOPPER,
    compute_capability=(9, 0),
    memory_mib=143771,
    pci_device_id=0x233510DE,
    bus_ids=tuple(
        f"00000000:{b:02X}:00.0" for b in (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
    ),
    default_gpus=8,
)
_A100 = _Model(
    name="NVIDIA A100-SXM4-80GB",
    architecture=config.Architecture.AMPERE,
    compute_capability=(8, 0),
    memory_mib=81920,
    pci_device_id=0x20B210DE,
    bus_ids=_H200.bus_ids,
    default_gpus=8,
)


class GpuModel(enum.StrEnum):
    """The GPU models the profiles use, for building ``GpuSpec``s with other identities."""

    GB200 = "gb200"
    H200 = "h200"
    A100 = "a100"


_MODELS = types.MappingProxyType(
    {GpuModel.GB200: _GB200, GpuModel.H200: _H200, GpuModel.A100: _A100}
)


def gpu_spec(model: GpuModel, *, uuid: str, pci_bus_id: str) -> config.GpuSpec:
    """A GPU of ``model`` with identities chosen by the caller (e.g. the sim's topology)."""
    return _spec(_MODELS[model], uuid, pci_bus_id)


def gpu_uuid(rack: int, node: int, gpu: int) -> str:
    """The simulated GPU's NVML UUID (``GPU-`` + UUIDv5), stable for (rack, node, gpu)."""
    return f"GPU-{uuid.uuid5(_NAMESPACE, f'gpu/{rack}/{node}/{gpu}')}"


def cluster_uuid(rack: int) -> str:
    """The rack's NVLink-domain (cluster) UUID, stable for the rack."""
    return str(uuid.uuid5(_NAMESPACE, f"cluster/{rack}"))


def _spec(model: _Model, ident: str, pci_bus_id: str) -> config.GpuSpec:
    return config.GpuSpec(
        uuid=ident,
        pci_bus_id=pci_bus_id,
        name=model.name,
        architecture=model.architecture,
        compute_capability=model.compute_capability,
        memory_total_bytes=model.memory_mib * _MIB,
        pci_device_id=model.pci_device_id,
    )


def _gpus(model: _Model, rack: int, node: int, count: int | None) -> tuple[config.GpuSpec, ...]:
    n = model.default_gpus if count is None else count
    return tuple(_spec(model, gpu_uuid(rack, node, i), model.bus_id(i)) for i in range(n))


def gb200(
    rack: int,
    node: int,
    *,
    gpus: int | None = None,
    clique_id: int = DEFAULT_CLIQUE_ID,
    cluster: str | None = None,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    cuda_version: str = DEFAULT_CUDA_VERSION,
) -> config.NodeNvmlConfig:
    """A GB200 tray in a healthy NVLink domain (``cluster`` defaults to the rack's UUID)."""
    return config.NodeNvmlConfig(
        driver_version=driver_version,
        cuda_version=cuda_version,
        gpus=_gpus(_GB200, rack, node, gpus),
        cluster_uuid=cluster_uuid(rack) if cluster is None else cluster,
        clique_id=clique_id,
        fabric_state=config.FabricState.COMPLETED,
        fabric_status=config.NvmlReturn.SUCCESS,
        fabric_health_mask=config.HEALTH_MASK_HEALTHY,
        fabric_health_summary=config.HealthSummary.HEALTHY,
    )


def h200(
    rack: int,
    node: int,
    *,
    gpus: int | None = None,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    cuda_version: str = DEFAULT_CUDA_VERSION,
) -> config.NodeNvmlConfig:
    """An H200 node: NVLink inside the node only, so a zero cluster UUID and no clique."""
    return config.NodeNvmlConfig(
        driver_version=driver_version,
        cuda_version=cuda_version,
        gpus=_gpus(_H200, rack, node, gpus),
        cluster_uuid=config.ZERO_CLUSTER_UUID,
        clique_id=0,
        fabric_state=config.FabricState.COMPLETED,
        fabric_status=config.NvmlReturn.SUCCESS,
    )


def fabric_in_progress(rack: int, node: int, *, gpus: int | None = None) -> config.NodeNvmlConfig:
    """A GB200 tray whose fabric registration is still running (no cluster UUID yet)."""
    return dataclasses.replace(
        gb200(rack, node, gpus=gpus),
        cluster_uuid=config.ZERO_CLUSTER_UUID,
        clique_id=0,
        fabric_state=config.FabricState.IN_PROGRESS,
        fabric_health_mask=0,
        fabric_health_summary=config.HealthSummary.NOT_SUPPORTED,
    )


def fabric_error(
    rack: int,
    node: int,
    *,
    gpus: int | None = None,
    status: int = config.NvmlReturn.UNKNOWN,
) -> config.NodeNvmlConfig:
    """A GB200 tray whose fabric registration completed with the failure ``status``."""
    return dataclasses.replace(
        gb200(rack, node, gpus=gpus),
        fabric_status=status,
        fabric_health_summary=config.HealthSummary.UNHEALTHY,
    )


def no_fabric(rack: int, node: int, *, gpus: int | None = None) -> config.NodeNvmlConfig:
    """An A100 node: the fabric-info calls themselves return ``NOT_SUPPORTED``."""
    return config.NodeNvmlConfig(
        driver_version=DEFAULT_DRIVER_VERSION,
        cuda_version=DEFAULT_CUDA_VERSION,
        gpus=_gpus(_A100, rack, node, gpus),
        fabric_return=config.NvmlReturn.NOT_SUPPORTED,
    )


def for_profile(
    profile: Profile, *, rack: int, node: int, gpus: int | None = None
) -> config.NodeNvmlConfig:
    """The node ``profile`` describes, with its defaults (``gpus`` None: the model's usual)."""
    match profile:
        case Profile.GB200:
            return gb200(rack, node, gpus=gpus)
        case Profile.H200:
            return h200(rack, node, gpus=gpus)
        case Profile.FABRIC_IN_PROGRESS:
            return fabric_in_progress(rack, node, gpus=gpus)
        case Profile.FABRIC_ERROR:
            return fabric_error(rack, node, gpus=gpus)
        case Profile.NO_FABRIC:
            return no_fabric(rack, node, gpus=gpus)
