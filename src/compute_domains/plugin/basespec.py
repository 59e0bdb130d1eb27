"""What the host's NVIDIA driver installation gives an IMEX daemon container: the base CDI spec.

Our image, like NVIDIA's, holds no NVIDIA software. A daemon container gets ``nvidia-imex``,
``nvidia-imex-ctl`` and what they need from the node's *driver root* through the base spec's
device ``all``, the way NVIDIA's plugin does with the container toolkit's "management" mode:

- every NVIDIA character device (``/dev/nvidia*``, ``nvidia-caps/*``, ``nvidia-uvm*``,
  IMEX channels; never ``nvidia-fs*``, ``nvidia-nvswitch*``, ``nvidia-nvlink*``), from the
  driver root's ``dev`` when it has them (a driver container) else the host's ``/dev``, given by
  path so the runtime takes type and numbers from the host node;
- the driver programs (``nvidia-smi``, ``nvidia-debugdump``, ``nvidia-persistenced``,
  ``nvidia-cuda-mps-control``, ``nvidia-cuda-mps-server``, ``nvidia-imex``, ``nvidia-imex-ctl``);
- the driver's libraries: every ``*.so.<driver version>`` in the folder holding
  ``libcuda.so.<driver version>``, plus their ``.so.1`` names (mounted as files, because we ask
  the runtime to run no hooks);
- the driver's IPC sockets (persistenced, fabric manager, MPS) and GSP firmware when present;
- ``NVIDIA_VISIBLE_DEVICES=void``.

Files are mounted read-only at their path relative to the driver root. Discovery reads the
plugin's view of the driver root (``local_root``) and writes host paths (``host_root``): the
runtime resolves ``hostPath`` on the host. Discovery is blocking IO; building is pure.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path

from compute_domains.infra import cdispec

BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
    "nvidia-imex",
    "nvidia-imex-ctl",
)
"""Driver programs a management container gets (IMEX's two among them)."""
IMEX_BINARIES = ("nvidia-imex", "nvidia-imex-ctl")
"""The programs the ComputeDomain daemon runs."""
BIN_DIRS = ("usr/bin", "usr/sbin", "bin", "sbin", "usr/local/bin", "usr/local/sbin")
"""Where a driver installation puts its programs, relative to the driver root."""
LIB_DIRS = (
    "usr/lib64",
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib64",
    "lib/x86_64-linux-gnu",
    "lib/aarch64-linux-gnu",
    "usr/lib",
    "lib",
)
"""Where a driver installation puts its libraries, relative to the driver root."""
IPC_SOCKETS = (
    "run/nvidia-persistenced/socket",
    "var/run/nvidia-persistenced/socket",
    "run/nvidia-fabricmanager/socket",
    "var/run/nvidia-fabricmanager/socket",
    "tmp/nvidia-mps",
)
"""Driver IPC endpoints, relative to the driver root."""
DEVICE_GLOBS = (
    "nvidia*",
    "nvidia-caps/nvidia-cap*",
    "nvidia-caps-imex-channels/channel*",
)
_SKIPPED_DEVICE_PREFIXES = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")
_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DriverFiles:
    """What was found in one driver root; paths are relative to it (no leading ``/``)."""

    dev_root: str
    """Host folder whose ``dev`` holds the device nodes (the driver root or ``/``)."""
    devices: tuple[str, ...]
    """Device nodes, relative to ``dev_root`` (e.g. ``dev/nvidia0``)."""
    binaries: tuple[str, ...]
    """Driver programs found (e.g. ``usr/bin/nvidia-imex``)."""
    libraries: tuple[str, ...]
    """Versioned driver libraries and their ``.so.1`` names."""
    sockets: tuple[str, ...]
    """IPC sockets found."""
    firmware: tuple[str, ...]
    """GSP firmware files of the driver version."""

    def missing_imex(self) -> tuple[str, ...]:
        """The IMEX programs this driver root lacks."""
        found = {Path(b).name for b in self.binaries}
        return tuple(b for b in IMEX_BINARIES if b not in found)


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _devices(dev_parent: Path) -> list[str]:
    found: set[str] = set()
    for pattern in DEVICE_GLOBS:
        for path in (dev_parent / "dev").glob(pattern):
            if path.name.startswith(_SKIPPED_DEVICE_PREFIXES) or not path.is_char_device():
                continue
            found.add(_rel(path, dev_parent))
    return sorted(found)


def _libraries(root: Path, version: str) -> list[str]:
    for sub in LIB_DIRS:
        folder = root / sub
        if not (folder / f"libcuda.so.{version}").is_file():
            continue
        versioned = sorted(p for p in folder.glob(f"*.so.{version}") if p.is_file())
        names = {p.name for p in versioned}
        out = [_rel(p, root) for p in versioned]
        for link in sorted(folder.glob("*.so.1")):
            # The soname links a runtime hook would create; only those of this driver.
            if link.is_symlink() and os.readlink(link).split("/")[-1] in names:
                out.append(_rel(link, root))
        return out
    return []


def discover(local_root: Path, version: str, *, host_dev: Path = Path("/")) -> DriverFiles:
    """Look for the driver's files under ``local_root`` (blocking).

    Args:
        local_root: where this process sees the driver root.
        version: the driver version NVML reported (selects libraries and firmware).
        host_dev: where this process sees the host's root for ``/dev`` (a privileged container
            on a real node sees the host's ``/dev``).
    """
    own_devices = _devices(local_root)
    binaries = []
    for name in BINARIES:
        for sub in BIN_DIRS:
            path = local_root / sub / name
            if path.is_file() and os.access(path, os.X_OK):
                binaries.append(f"{sub}/{name}")
                break
    firmware_dir = local_root / "lib/firmware/nvidia" / version
    firmware = sorted(_rel(p, local_root) for p in firmware_dir.glob("gsp*.bin"))
    return DriverFiles(
        dev_root="driver" if own_devices else "host",
        devices=tuple(own_devices or _devices(host_dev)),
        binaries=tuple(binaries),
        libraries=tuple(_libraries(local_root, version)),
        sockets=tuple(s for s in IPC_SOCKETS if (local_root / s).exists()),
        firmware=tuple(firmware),
    )


def _host(root: Path, rel: str) -> str:
    return (root / rel).as_posix()


def edits(files: DriverFiles, host_root: Path) -> cdispec.ContainerEdits:
    """Container edits of the base spec's device ``all`` (pure).

    Args:
        files: what ``discover`` found.
        host_root: the driver root's path on the host (what the runtime resolves).
    """
    dev_root = host_root if files.dev_root == "driver" else Path("/")
    mounted: Iterable[str] = (*files.binaries, *files.libraries, *files.sockets, *files.firmware)
    return cdispec.ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=void",),
        device_nodes=tuple(
            cdispec.DeviceNode(path="/" + d, host_path=_host(dev_root, d)) for d in files.devices
        ),
        mounts=tuple(
            cdispec.Mount(
                host_path=_host(host_root, rel),
                container_path="/" + rel,
                options=_MOUNT_OPTIONS,
            )
            for rel in mounted
        ),
    )
