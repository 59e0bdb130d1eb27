"""The shapes of discovery's answer: the node's GPUs, clique and majors, and the NVML it reads.

Plain data and protocols, no logic: ``NodeInfo`` (what ``discovery`` found on this node) with its
``GpuInfo`` per visited GPU and their ``FabricState``, ``CapabilityDevice`` (a capability file's
device), ``DiscoveryError`` (the node's hardware state forbids starting), the ``Nvml`` surface
discovery reads (a module such as ``pynvml`` or any object with these members) and the
``Discovery`` protocol the plugin needs (``discovery.NvmlDiscovery`` in production, plain data in
tests and the simulator).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Protocol

from compute_domains.infra import errors
from compute_domains.plugin import fabricinfo


class FabricState(enum.IntEnum):
    """NVML GPU fabric state (``NVML_GPU_FABRIC_STATE_*``)."""

    NOT_SUPPORTED = 0
    NOT_STARTED = 1
    IN_PROGRESS = 2
    COMPLETED = 3


class DiscoveryError(errors.ConfigError):
    """The node's hardware state forbids starting (fabric not ready, cliques disagree, ...)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GpuInfo:
    """One visited GPU."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str
    fabric_state: FabricState | None
    """None when NVML reports fabric info as not supported."""
    cluster_uuid: str = ""
    """The NVLink cluster UUID; empty when the GPU contributes no clique."""
    clique: int | None = None
    """The clique number within the cluster; None when the GPU contributes no clique."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeInfo:
    """Everything discovery found on this node."""

    driver_version: str
    gpus: tuple[GpuInfo, ...]
    clique_id: str
    """``<clusterUUID>.<cliqueId>``, or empty when the node is not part of an MNNVL domain."""
    channel_major: int | None
    """Char major of ``nvidia-caps-imex-channels``; None when absent (allowed without clique)."""
    caps_major: int | None
    """Char major of ``nvidia-caps``; None when absent (only allowed without clique)."""
    binding: fabricinfo.BindingCheck | None = None
    """The NVML binding and how its fabric structures compare with the C layout."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CapabilityDevice:
    """The device file of an NVIDIA capability (``/proc/driver/nvidia/capabilities/*``)."""

    minor: int
    file_mode: int
    modify: int


class Nvml(Protocol):
    """The part of ``pynvml`` discovery uses (a module or any object with these members)."""

    NVMLError: type[Exception]
    NVML_SUCCESS: int
    NVML_ERROR_NOT_SUPPORTED: int
    NVML_ERROR_FUNCTION_NOT_FOUND: int
    NVML_INIT_FLAG_NO_GPUS: int

    def nvmlInitWithFlags(self, flags: int) -> None: ...  # noqa: D102
    def nvmlShutdown(self) -> None: ...  # noqa: D102
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...  # noqa: D102
    def nvmlDeviceGetCount(self) -> int: ...  # noqa: D102
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...  # noqa: D102
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...  # noqa: D102
    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...  # noqa: D102
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...  # noqa: D102
    def nvmlErrorString(self, result: int) -> str | bytes: ...  # noqa: D102

    # The fabric read also takes the C entry points from the binding's own lookup, by name
    # (``fabricinfo.LOOKUP``), and with them ``fabricinfo``'s structures.


class Discovery(Protocol):
    """What the plugin needs from hardware discovery (tests pass plain data instead)."""

    def discover(self) -> NodeInfo:
        """Inspect the node; blocking."""
        ...
