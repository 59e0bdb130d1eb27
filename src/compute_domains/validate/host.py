"""Read-only facts about the GPU host that discovery does not cover (blocking file reads).

- ``require_gpus``: is there an NVIDIA GPU at all? (NVML starts and sees at least one GPU.)
- ``find_imex``: a host ``nvidia-imex`` binary, systemd unit or running process. ComputeDomains
  run their own IMEX daemon per domain in a pod; a host service holding the channels conflicts.
- ``driver_params``: ``/proc/driver/nvidia/params`` (``ImexChannelCount``, ``CreateImexChannel0``).
- ``device_minor``: a GPU's ``/dev/nvidia<minor>`` from ``/proc/driver/nvidia/gpus/<bus>/``.
Every path is a parameter so tests can point at a fake tree.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compute_domains.validate import report

IMEX_NAMES = ("nvidia-imex", "nvidia-imex-ctl")
"""Host binaries of the IMEX service."""
IMEX_UNIT = "nvidia-imex.service"
"""The systemd unit the driver packages install."""
BIN_DIRS = ("/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin", "/bin", "/sbin")
"""Where a packaged ``nvidia-imex`` would be."""
UNIT_DIRS = ("/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")
"""Where its systemd unit would be."""
DRIVER_PARAMS = Path("/proc/driver/nvidia/params")
"""The NVIDIA kernel module's parameters."""
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")
"""One folder per GPU, named by PCI bus ID, each with an ``information`` file."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImexPresence:
    """Where a host IMEX service shows up (all empty: absent, as ComputeDomains need)."""

    binaries: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    running_pids: tuple[int, ...] = ()

    @property
    def present(self) -> bool:
        """Whether any trace of a host IMEX service exists."""
        return bool(self.binaries or self.units or self.running_pids)


def require_gpus(nvml: Any | None = None) -> int:
    """The number of GPUs NVML sees; raises when there are none.

    Args:
        nvml: the NVML module (default: the real ``pynvml``, imported here).

    Raises:
        report.NoGpuError: NVML is missing or cannot start, or sees zero GPUs.
    """
    if nvml is None:
        try:
            import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no types
        except ImportError as err:
            raise report.NoGpuError("no NVIDIA GPU here: nvidia-ml-py is not installed") from err
        nvml = pynvml
    try:
        nvml.nvmlInitWithFlags(nvml.NVML_INIT_FLAG_NO_GPUS)
    except nvml.NVMLError as err:
        raise report.NoGpuError(f"no NVIDIA GPU here: NVML cannot start ({err})") from err
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as err:
        raise report.NoGpuError(f"no NVIDIA GPU here: NVML cannot count GPUs ({err})") from err
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass  # the count is read; a failed close changes nothing
    if count == 0:
        raise report.NoGpuError("no NVIDIA GPU here: NVML sees 0 GPUs")
    return count


def find_imex(
    *,
    bin_dirs: Sequence[str] = BIN_DIRS,
    unit_dirs: Sequence[str] = UNIT_DIRS,
    proc_root: Path = Path("/proc"),
) -> ImexPresence:
    """Look for a host IMEX binary, systemd unit and running process."""
    binaries = sorted(
        {str(Path(d) / name) for d in bin_dirs for name in IMEX_NAMES if (Path(d) / name).is_file()}
    )
    units = sorted(str(Path(d) / IMEX_UNIT) for d in unit_dirs if (Path(d) / IMEX_UNIT).exists())
    pids = []
    for entry in proc_root.iterdir() if proc_root.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue  # gone or not readable
        if comm == IMEX_NAMES[0]:
            pids.append(int(entry.name))
    return ImexPresence(binaries=tuple(binaries), units=tuple(units), running_pids=tuple(pids))


def driver_params(path: Path = DRIVER_PARAMS) -> dict[str, str]:
    """``Key: Value`` lines of the driver's parameter file; empty when it is missing."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    return {
        key.strip(): value.strip()
        for key, sep, value in (line.partition(":") for line in text.splitlines())
        if sep
    }


def short_bus_id(pci_bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` as the kernel writes it, ``0000:18:00.0`` (lower case)."""
    domain, sep, rest = pci_bus_id.partition(":")
    if not sep:
        return pci_bus_id.lower()
    return f"{int(domain, 16):04x}:{rest.lower()}"


def device_minor(pci_bus_id: str, gpus_dir: Path = DRIVER_GPUS) -> int | None:
    """The ``Device Minor`` of the GPU at ``pci_bus_id``; None when the driver does not say."""
    try:
        text = (gpus_dir / short_bus_id(pci_bus_id) / "information").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Device Minor":
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


def char_device(path: Path) -> tuple[int, int] | None:
    """(major, minor) of the character device at ``path``; None when it is not one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return os.major(st.st_rdev), os.minor(st.st_rdev)


def channel_nodes(folder: Path) -> tuple[str, ...]:
    """Names of the IMEX channel nodes that exist on the host (normally none)."""
    if not folder.is_dir():
        return ()
    return tuple(sorted(p.name for p in folder.iterdir() if p.name.startswith("channel")))
