"""Discover this node's GPUs, NVLink clique and IMEX device majors (NVML + /proc files).

``NvmlDiscovery.discover()`` is the production ``Discovery``; everything it calls is blocking, so
the plugin runs it through ``asyncio.to_thread``. The NVML module is a parameter (default: the
real ``pynvml``), so tests and the simulator can pass their own.

Rules (shared/spec/upstream-plugin-and-daemon.md §2.3, §5.4):
- One NVML session, opened with ``NVML_INIT_FLAG_NO_GPUS`` (zero GPUs is no error) and always shut
  down. GPUs are visited in index order; ``DGX Display`` devices are skipped.
- Strict fabric mode (the default): NVML "not supported" or fabric state NOT_SUPPORTED skips a GPU;
  state NOT_STARTED/IN_PROGRESS, a non-success fabric status, or any other NVML error is fatal.
  Non-strict mode skips every GPU whose fabric is not fully up instead.
- Fabric info is read with NVML's C structure layout (``fabricinfo``), never the binding's
  ctypes mirror (wrong in nvidia-ml-py < 13.615.71); a binding that cannot do that is refused.
- An all-zero cluster UUID means "NVLink but not multi-node": no clique from that GPU.
- The clique ID is ``<clusterUUID>.<cliqueId>`` if every GPU that reported one agrees, empty if
  none did; GPUs that disagree are fatal.
- Char majors come from the "Character devices:" section of ``/proc/devices``; a name must match
  exactly once. With a clique ID set, both the IMEX-channel and the nvidia-caps majors must exist.

The answer's shapes (``NodeInfo``, ``GpuInfo``, ``FabricState``, ``CapabilityDevice``,
``DiscoveryError``) and the NVML surface it reads (the ``Nvml`` protocol) are ``nodeinfo``'s.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from pathlib import Path
from typing import Any

from compute_domains.plugin import fabricinfo, nodeinfo

logger = logging.getLogger(__name__)

PROC_DEVICES = Path("/proc/devices")
"""Default path of the kernel's device-major table."""
IMEX_CHANNELS_DEVICE = "nvidia-caps-imex-channels"
"""``/proc/devices`` name of the IMEX channel char devices."""
CAPS_DEVICE = "nvidia-caps"
"""``/proc/devices`` name of the NVIDIA capability char devices."""
_SKIPPED_NAMES = frozenset({"DGX Display", "NVIDIA DGX Display"})
_ZERO_UUID = str(uuid.UUID(int=0))


class NvmlDiscovery:
    """``nodeinfo.Discovery`` through NVML and ``/proc/devices``."""

    def __init__(
        self,
        *,
        proc_devices: Path = PROC_DEVICES,
        strict_fabric: bool = True,
        nvml: nodeinfo.Nvml | None = None,
    ) -> None:
        """Args: proc_devices: device-major table; strict_fabric: the CrashOnNVLinkFabricErrors
        semantics; nvml: the NVML module (default: the real ``pynvml``)."""
        self._proc_devices = proc_devices
        self._strict = strict_fabric
        self._nvml = nvml

    def discover(self) -> nodeinfo.NodeInfo:
        """Inspect the node (blocking; NVML session opened and closed here).

        Raises:
            nodeinfo.DiscoveryError: fabric not ready (strict), cliques disagree, NVML failed,
                or a needed char major is missing or ambiguous.
        """
        nvml = self._nvml if self._nvml is not None else _real_nvml()
        binding = fabricinfo.check_binding(nvml)  # what was used, for the start log and reports
        driver, gpus = discover_gpus(nvml, strict_fabric=self._strict)
        clique_id = clique_id_of(gpus)
        text = self._proc_devices.read_text()
        channel_major = find_char_major(text, IMEX_CHANNELS_DEVICE)
        caps_major = find_char_major(text, CAPS_DEVICE)
        if clique_id and (channel_major is None or caps_major is None):
            raise nodeinfo.DiscoveryError(
                f"clique {clique_id} found but {self._proc_devices} lacks "
                f"'{IMEX_CHANNELS_DEVICE}' or '{CAPS_DEVICE}': is the NVIDIA driver loaded?"
            )
        return nodeinfo.NodeInfo(
            driver_version=driver,
            gpus=gpus,
            clique_id=clique_id,
            channel_major=channel_major,
            caps_major=caps_major,
            binding=binding,
        )


LIBRARY_NOT_FOUND = 12
"""``NVML_ERROR_LIBRARY_NOT_FOUND`` (nvml.h): no ``libnvidia-ml.so.1`` could be loaded."""


def with_driver_root(
    err: nodeinfo.DiscoveryError, *, driver_root: Path, seen_at: Path
) -> nodeinfo.DiscoveryError:
    """``err``, and when NVML's library was not found, where we looked and the chart key that
    moves it (a driver root left at ``/`` under the GPU Operator is the usual cause)."""
    if getattr(err.__cause__, "value", None) != LIBRARY_NOT_FOUND:
        return err
    hint = nodeinfo.DiscoveryError(
        f"{err}; looked for libnvidia-ml.so.1 under the driver root {driver_root} (chart value "
        f"nvidiaDriverRoot; this container sees it at {seen_at}): set nvidiaDriverRoot to the "
        "host folder the NVIDIA driver is installed in ('/' for a driver on the host, "
        "'/run/nvidia/driver' for the GPU Operator's)"
    )
    hint.__cause__ = err.__cause__
    return hint


def discover_gpus(
    nvml: nodeinfo.Nvml, *, strict_fabric: bool = True
) -> tuple[str, tuple[nodeinfo.GpuInfo, ...]]:
    """The driver version and the visited GPUs, in one NVML session (blocking).

    Raises:
        nodeinfo.DiscoveryError: an NVML call failed or (strict) the fabric is not in a usable
            state.
    """
    try:  # before NVML starts: refusing the binding needs no session
        fabricinfo.require_usable(nvml)
    except fabricinfo.BindingError as err:
        raise nodeinfo.DiscoveryError(str(err)) from err
    try:
        nvml.nvmlInitWithFlags(nvml.NVML_INIT_FLAG_NO_GPUS)
    except nvml.NVMLError as err:
        raise nodeinfo.DiscoveryError(f"NVML initialisation failed: {err}") from err
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(handle))
            if name in _SKIPPED_NAMES:
                continue
            gpus.append(_gpu(nvml, handle, index, name, strict_fabric))
        return driver, tuple(gpus)
    except (nvml.NVMLError, fabricinfo.CallError) as err:
        raise nodeinfo.DiscoveryError(f"NVML query failed: {err}") from err
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as err:  # the answers are already read; a failed close is noise
            logger.warning("NVML shutdown failed: %s", err)


def clique_id_of(gpus: tuple[nodeinfo.GpuInfo, ...]) -> str:
    """``<clusterUUID>.<cliqueId>`` shared by all GPUs that have one, or empty.

    Raises:
        nodeinfo.DiscoveryError: GPUs report more than one cluster UUID or clique.
    """
    seen = {(g.cluster_uuid, g.clique) for g in gpus if g.clique is not None}
    if not seen:
        return ""
    if len(seen) > 1:
        found = ", ".join(sorted(f"{u}.{c}" for u, c in seen))
        raise nodeinfo.DiscoveryError(
            f"GPUs on this node disagree about their NVLink clique: {found}"
        )
    cluster, clique = seen.pop()
    return f"{cluster}.{clique}"


def find_char_major(text: str, name: str) -> int | None:
    """The major of char device ``name`` in ``/proc/devices`` content; None when not listed.

    Raises:
        nodeinfo.DiscoveryError: the content has no "Character devices:" section followed by a
            "Block devices:" one, ``name`` is listed more than once, or the major exceeds 32 bits.
    """
    start = text.find("Character devices:")
    end = text.find("Block devices:", start + 1)
    if start < 0 or end < 0:
        raise nodeinfo.DiscoveryError("unexpected /proc/devices layout: missing section headers")
    pattern = re.compile(rf"^\s*(\d+) {re.escape(name)}$", re.MULTILINE)
    majors = [int(m.group(1)) for m in pattern.finditer(text, start, end)]
    if len(majors) > 1:
        raise nodeinfo.DiscoveryError(
            f"char device {name!r} listed {len(majors)} times in /proc/devices"
        )
    if majors and majors[0] > 0xFFFF_FFFF:
        raise nodeinfo.DiscoveryError(f"char device {name!r} has an out-of-range major {majors[0]}")
    return majors[0] if majors else None


def parse_capability(text: str) -> nodeinfo.CapabilityDevice:
    """Parse a capability file's ``Key: Value`` lines (``DeviceFileMinor``/``Mode``/``Modify``).

    Raises:
        nodeinfo.DiscoveryError: a key is missing or not a decimal integer.
    """
    fields = dict(
        (key.strip(), value.strip())
        for key, sep, value in (line.partition(":") for line in text.splitlines())
        if sep
    )
    try:
        return nodeinfo.CapabilityDevice(
            minor=int(fields["DeviceFileMinor"]),
            file_mode=int(fields["DeviceFileMode"]),
            modify=int(fields["DeviceFileModify"]),
        )
    except (KeyError, ValueError) as err:
        raise nodeinfo.DiscoveryError(f"invalid NVIDIA capability file: {err!r}") from err


def _gpu(nvml: nodeinfo.Nvml, handle: Any, index: int, name: str, strict: bool) -> nodeinfo.GpuInfo:
    gpu_uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    bus_id = _text(getattr(nvml.nvmlDeviceGetPciInfo(handle), "busId", b""))
    base = nodeinfo.GpuInfo(
        index=index, uuid=gpu_uuid, pci_bus_id=bus_id, name=name, fabric_state=None
    )
    info = _fabric_info(nvml, handle)
    if info is None:
        return base
    where = f"GPU {index} ({gpu_uuid})"
    try:
        state = nodeinfo.FabricState(info.state)
    except ValueError:
        raise nodeinfo.DiscoveryError(
            f"{where}: NVML reports unknown fabric state {info.state}"
        ) from None
    base = dataclasses.replace(base, fabric_state=state)
    if state is nodeinfo.FabricState.NOT_SUPPORTED:
        return base
    if state is not nodeinfo.FabricState.COMPLETED:
        if strict:
            raise nodeinfo.DiscoveryError(
                f"{where}: NVLink fabric state is {state.name}; refusing to start until the "
                "fabric manager finished (or disable strict fabric checks)"
            )
        return base
    if info.status != nvml.NVML_SUCCESS:
        if strict:
            raise nodeinfo.DiscoveryError(
                f"{where}: NVLink fabric registration failed (status {info.status})"
            )
        return base
    cluster = str(uuid.UUID(bytes=info.cluster_uuid))
    if cluster == _ZERO_UUID:
        return base  # NVLink-capable, but not part of a multi-node NVLink domain
    return dataclasses.replace(base, cluster_uuid=cluster, clique=info.clique_id)


def _fabric_info(nvml: nodeinfo.Nvml, handle: Any) -> fabricinfo.Reading | None:
    """The GPU's fabric answer, or None when NVML does not support it for this GPU."""
    binding: Any = nvml  # has the lookup: discover_gpus checked
    try:
        return fabricinfo.read(binding, handle, versioned=False)
    except (nvml.NVMLError, fabricinfo.CallError) as err:
        code = getattr(err, "value", None)
        if code == nvml.NVML_ERROR_NOT_SUPPORTED:
            return None
        if code != nvml.NVML_ERROR_FUNCTION_NOT_FOUND:
            raise
    # Drivers that dropped the deprecated entry point only offer the versioned one.
    try:
        return fabricinfo.read(binding, handle, versioned=True)
    except (nvml.NVMLError, fabricinfo.CallError) as err:
        if getattr(err, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
            return None
        raise


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _real_nvml() -> nodeinfo.Nvml:
    import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type information

    nvml: nodeinfo.Nvml = pynvml
    return nvml
