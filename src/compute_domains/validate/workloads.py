"""CDI specs for validation workloads and their resolution into container configs.

A workload container gets two kinds of CDI devices, as a ComputeDomain pod does:
- a GPU, from a stand-in for the GPU driver's spec (kind ``GPU_KIND``, devices ``gpu<index>``:
  the GPU's ``/dev/nvidia<minor>`` plus the control nodes ``nvidiactl``, ``nvidia-uvm`` and
  ``nvidia-uvm-tools``, with the numbers of the host's nodes); in a cluster that spec belongs to
  the GPU driver, not to us;
- an IMEX channel, from **our** plugin's per-claim spec: ``plugin.cdi.channel_edits`` with the
  real char major from ``/proc/devices``, wrapped by ``plugin.cdi.build_claim_spec`` and written
  by ``plugin.cdi.CdiWriter``, exactly the calls the plugin's prepare makes.
``resolve`` reads the spec folder back and injects the devices with ``containers.cdi`` (the
runtime's CDI step, shared with the simulated runtime) into ``containers.runtime`` device
nodes; nodes without numbers take the host node's (under ``host_root``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from compute_domains.containers import cdi as runtime_cdi
from compute_domains.containers import runtime
from compute_domains.infra import atomicfile, cdispec, errors
from compute_domains.plugin import cdi, nodeinfo
from compute_domains.validate import host

GPU_KIND = "validate.compute-domain.nvidia.com/gpu"
"""Kind of the GPU stand-in spec (what the GPU driver's CDI spec provides in a cluster)."""
GPU_SPEC_FILE = "validate.compute-domain.nvidia.com-gpu.json"
"""File name of the GPU stand-in spec inside the CDI folder."""
CHANNEL_SLOT = "channel-0"
"""The allocatable channel device a workload claim gets (the plugin's first channel slot)."""
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
"""Device nodes every CUDA process needs besides its GPU's own node."""


class WorkloadError(errors.PermanentError):
    """A workload's devices cannot be described or resolved."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HostGpu:
    """One GPU as a container needs it: identity plus its device node."""

    index: int
    pci_bus_id: str
    node: cdispec.DeviceNode


def host_gpus(
    gpus: Sequence[nodeinfo.GpuInfo],
    *,
    dev_root: Path = Path("/dev"),
    gpus_dir: Path | None = None,
) -> tuple[tuple[HostGpu, ...], tuple[cdispec.DeviceNode, ...]]:
    """The GPUs' device nodes and the control nodes, numbered from the host's nodes (blocking).

    Raises:
        WorkloadError: a GPU's node or ``nvidiactl`` is missing on the host.
    """
    out = []
    for gpu in gpus:
        minor = host.device_minor(gpu.pci_bus_id, gpus_dir or host.DRIVER_GPUS)
        name = f"nvidia{gpu.index if minor is None else minor}"
        out.append(
            HostGpu(index=gpu.index, pci_bus_id=gpu.pci_bus_id, node=_host_node(dev_root, name))
        )
    control = tuple(
        _host_node(dev_root, name) for name in CONTROL_NODES if (dev_root / name).exists()
    )
    if not any(n.path == "/dev/nvidiactl" for n in control):
        raise WorkloadError(f"{dev_root}/nvidiactl is missing: is the NVIDIA driver loaded?")
    return tuple(out), control


def gpu_spec(gpus: Sequence[HostGpu], control: Sequence[cdispec.DeviceNode]) -> cdispec.Spec:
    """The GPU stand-in spec: device ``gpu<index>`` = control nodes + that GPU's node."""
    devices = tuple(
        cdispec.Device(
            name=f"gpu{g.index}",
            edits=cdispec.ContainerEdits(device_nodes=(*control, g.node)),
        )
        for g in gpus
    )
    return cdispec.Spec(version="0.3.0", kind=GPU_KIND, devices=devices)


def gpu_device_id(index: int) -> str:
    """CDI name of GPU ``index`` in the stand-in spec."""
    return cdispec.qualified_name(GPU_KIND, f"gpu{index}")


def channel_claim(claim_uid: str, channel: int, *, major: int) -> cdi.ClaimSpec:
    """The plugin's CDI spec for a workload claim whose slot maps to IMEX channel ``channel``."""
    edits = cdi.channel_edits([channel], major=major)
    spec = cdi.build_claim_spec(claim_uid, {CHANNEL_SLOT: edits})
    if spec is None:  # channel edits always hold a node; kept for the type checker
        raise WorkloadError(f"claim {claim_uid}: the plugin built no CDI spec")
    return spec


def write_specs(cdi_dir: Path, gpus: cdispec.Spec, claims: Sequence[cdi.ClaimSpec]) -> None:
    """Write the GPU spec and each claim's spec (through the plugin's writer) into ``cdi_dir``."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    atomicfile.write_atomic(cdi_dir / GPU_SPEC_FILE, cdispec.to_json(gpus), mode=0o644)
    writer = cdi.CdiWriter(cdi_dir)
    for claim in claims:
        writer.write_claim_spec(claim)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Resolved:
    """What a runtime injects for a set of CDI devices."""

    env: dict[str, str]
    devices: tuple[runtime.DeviceNode, ...]


def resolve(cdi_dir: Path, device_ids: Sequence[str], *, host_root: Path = Path("/")) -> Resolved:
    """Resolve CDI device names from the specs in ``cdi_dir`` the way a runtime does (blocking).

    Raises:
        WorkloadError: a spec file is invalid, a name is unknown, or a node without numbers
            has no host node to copy them from (under ``host_root``).
    """
    specs, bad = cdispec.load_spec_dirs([cdi_dir])
    if bad:
        path, err = next(iter(bad.items()))
        raise WorkloadError(f"invalid CDI spec {path}: {err}")
    try:
        injected = runtime_cdi.inject(device_ids, specs, host=cdispec.RootedHost(root=host_root))
    except (cdispec.UnresolvableDevicesError, cdispec.InjectionError) as err:
        raise WorkloadError(str(err)) from err
    return Resolved(env=injected.env, devices=injected.devices)


def container_config(
    argv: Sequence[str],
    resolved: Resolved,
    *,
    env: Mapping[str, str],
    mounts: Sequence[runtime.Mount],
    hostname: str,
) -> runtime.ContainerConfig:
    """A runtime config: base ``env`` plus the CDI env, the CDI device nodes and ``mounts``."""
    return runtime.ContainerConfig(
        argv=tuple(argv),
        env={**env, **resolved.env},
        hostname=hostname,
        mounts=tuple(mounts),
        devices=resolved.devices,
    )


def _host_node(dev_root: Path, name: str) -> cdispec.DeviceNode:
    numbers = host.char_device(dev_root / name)
    if numbers is None:
        raise WorkloadError(f"{dev_root / name} is not a character device on this host")
    return cdispec.DeviceNode(
        path=f"/dev/{name}", type="c", major=numbers[0], minor=numbers[1], file_mode=0o666
    )
