"""A simulated node's NVIDIA driver installation, laid out as on a real GB200 host.

A real host's driver lives under its *driver root* (``/``, or ``/run/nvidia/driver`` when the
GPU operator's driver container installs it). Any driver (ours or NVIDIA's) finds NVML there
through a ``hostPath`` volume, and the IMEX daemon gets ``nvidia-imex`` from there only through
the kubelet plugin's base CDI spec. So the simulator puts its stand-ins exactly where a real
installation puts the real programs, and nowhere else:

- ``usr/lib64/libnvidia-ml.so.<version>`` (the NVML stand-in) with its ``.so.1`` link and, next
  to it, ``mock-nvml.conf`` (the node's NVML answers; the stand-in finds it beside itself);
  ``libcuda.so.<version>`` (+ ``.so.1``), which CDI generators use to find the library folder;
- ``usr/bin/nvidia-imex``, ``usr/bin/nvidia-imex-ctl``, ``usr/bin/nvidia-smi`` (stand-ins);
- ``lib/firmware/nvidia/<version>/gsp_*.bin`` (placeholders: no program reads them here);
- ``dev/nvidia<N>``, ``nvidiactl``, ``nvidia-uvm``, ``nvidia-uvm-tools``,
  ``nvidia-caps/nvidia-cap{1,2}``: character devices with a GB200 host's majors, both under the
  driver root and in the node's own ``/dev`` (the driver container creates them on the host).

The node's ``/proc/devices`` and ``/proc/driver/nvidia`` stand-ins are written here too; every
container on the node sees them over its ``/proc`` (``containers.container_init``).
Device nodes need root (``mknod``); without it they are left out and ``layout`` says so.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import stat
import sys
from pathlib import Path

from compute_domains.infra import atomicfile
from compute_domains.sim.nvml import build as nvml_build
from compute_domains.sim.nvml import config as nvml_config

DRIVER_ROOT = "/run/nvidia/driver"
"""Where the driver of every simulated node is installed (the GPU operator's location)."""
LIB_DIR = "usr/lib64"
"""Library folder under the driver root."""
BIN_DIR = "usr/bin"
"""Program folder under the driver root."""
NVML_CONFIG_NAME = "mock-nvml.conf"
"""The NVML stand-in's per-node config, read from beside the library (``mocknvml.c``)."""
IMEX_CHANNEL_MAJOR = 238
"""``nvidia-caps-imex-channels`` major in the ``/proc/devices`` stand-in (real hosts differ)."""
NVIDIA_CAPS_MAJOR = 239
"""``nvidia-caps`` major in the ``/proc/devices`` stand-in."""
NVIDIA_MAJOR = 195
"""``nvidia-frontend``: ``/dev/nvidia<N>`` and ``/dev/nvidiactl`` (255)."""
NVIDIA_UVM_MAJOR = 510
"""``nvidia-uvm``: ``/dev/nvidia-uvm`` (0) and ``/dev/nvidia-uvm-tools`` (1)."""
_STAND_INS = {
    "nvidia-imex": "compute_domains.sim.imex_main imex",
    # nvidia-smi loads NVML from its own installation's library folder, as the real one does.
    "nvidia-smi": 'compute_domains.sim.nvidia_smi --lib-dir "$(dirname "$0")/../lib64"',
}
PACKAGE_PARENT = Path(__file__).parents[2]
"""The folder that holds this ``compute_domains`` package (what the stand-ins run)."""


def ctl_script(python: str, package_parent: Path = PACKAGE_PARENT) -> str:
    """The ``nvidia-imex-ctl`` wrapper: ``imex_main ctl`` started the way a probe can afford.

    Every IMEX check starts one (each daemon's every ``period`` while READY), and the real tool
    is a native binary that starts in a millisecond. So the interpreter runs without ``site``
    (``-S``: no site-packages scan, no ``.pth`` files; the package's folder goes on the path
    where site-packages would be, after ``PYTHONPATH``) and without ``runpy`` (``-c`` imports
    the entry instead of ``-m``); ``imex_main`` then answers ``-q`` with ``imex_query`` and
    runs ``site`` itself before any other command line. SIGUSR1 and SIGHUP are ignored from
    the start, as the ``python -m`` entry did once it ran (it no longer loads ``signal`` for
    a ``-q``).
    """
    code = (
        f"import sys; sys.path.append({str(package_parent)!r}); "
        "import compute_domains.sim.imex_main"
    )
    return f"#!/bin/sh\ntrap '' USR1 HUP\nexec {python} -S -c {shlex.quote(code)} ctl \"$@\"\n"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """What ``layout`` wrote for one node."""

    driver_root: Path
    """The driver root inside the node root."""
    device_nodes: tuple[str, ...]
    """Host paths (``/dev/...``) of the NVIDIA device nodes made; empty without root."""


def proc_devices() -> str:
    """The ``/proc/devices`` stand-in of a GB200 node (majors as a real host lists them)."""
    return (
        "Character devices:\n  1 mem\n  4 /dev/vc/0\n  5 /dev/tty\n 10 misc\n"
        f"{NVIDIA_MAJOR} nvidia-frontend\n{IMEX_CHANNEL_MAJOR} nvidia-caps-imex-channels\n"
        f"{NVIDIA_CAPS_MAJOR} nvidia-caps\n{NVIDIA_UVM_MAJOR} nvidia-uvm\n\n"
        "Block devices:\n  8 sd\n259 blkext\n"
    )


def device_nodes(gpus: int) -> dict[str, tuple[int, int]]:
    """``/dev`` path → (major, minor) of a host with ``gpus`` GPUs."""
    nodes = {f"/dev/nvidia{i}": (NVIDIA_MAJOR, i) for i in range(gpus)}
    nodes["/dev/nvidiactl"] = (NVIDIA_MAJOR, 255)
    nodes["/dev/nvidia-uvm"] = (NVIDIA_UVM_MAJOR, 0)
    nodes["/dev/nvidia-uvm-tools"] = (NVIDIA_UVM_MAJOR, 1)
    # fabric-imex-mgmt (1) and fabric-mgmt (2) capabilities, as a GB200 host lists them.
    nodes["/dev/nvidia-caps/nvidia-cap1"] = (NVIDIA_CAPS_MAJOR, 1)
    nodes["/dev/nvidia-caps/nvidia-cap2"] = (NVIDIA_CAPS_MAJOR, 2)
    return nodes


def _write(path: Path, data: bytes | str, *, mode: int = 0o644) -> None:
    # Atomic for the node's readers, without fsyncs: a node's stand-ins are rewritten at each
    # start, and 1,152 nodes x 20 files x 2 fsyncs made the stand-ins most of a sim's start-up.
    atomicfile.write_atomic(path, data, mode=mode, durable=False)


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


def _link(path: Path, target: str) -> None:
    if path.is_symlink() and os.readlink(path) == target:
        return
    path.unlink(missing_ok=True)
    path.symlink_to(target)


def _proc_driver(proc: Path, cfg: nvml_config.NodeNvmlConfig) -> None:
    nvidia = proc / "driver/nvidia"
    _write(
        nvidia / "version",
        f"NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  {cfg.driver_version}  "
        "Release Build  (simulated)\nGCC version:  gcc version 13.3.0\n",
    )
    _write(nvidia / "params", "ImexChannelCount: 2048\nCreateImexChannel0: 0\n")
    # The driver's capability file for IMEX management (a GB200 host has it; minor 1).
    _write(
        nvidia / "capabilities/fabric-imex-mgmt",
        "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n",
    )
    for index, gpu in enumerate(cfg.gpus):
        _write(
            nvidia / "gpus" / gpu.pci_bus_id.lower() / "information",
            f"Model: \t\t {gpu.name}\nGPU UUID: \t {gpu.uuid}\nBus Location: \t "
            f"{gpu.pci_bus_id.lower()}\nDevice Minor: \t {index}\n",
        )


def layout(
    node_root: Path,
    cfg: nvml_config.NodeNvmlConfig,
    nvml_library: Path | None,
    *,
    python: str = sys.executable,
) -> Layout:
    """Write (or refresh) the node's driver installation and procfs stand-ins (blocking).

    Args:
        node_root: the folder that plays the node's host filesystem.
        cfg: the node's NVML answers (driver version, GPUs).
        nvml_library: the built NVML stand-in (copied, not linked: containers see the node
            root, not the sim's own folders); None leaves NVML out (a node without a driver).
        python: interpreter the stand-in programs run with.
    """
    root = node_root / DRIVER_ROOT.lstrip("/")
    version = cfg.driver_version
    lib = root / LIB_DIR
    lib.mkdir(parents=True, exist_ok=True)
    if nvml_library is not None:
        cuda = nvml_library.parent / nvml_build.LIBCUDA_NAME
        for name, source in (("libnvidia-ml", nvml_library), ("libcuda", cuda)):
            # libcuda is a placeholder (its own soname, no symbols): CDI generators locate the
            # library folder by it; no simulated program calls CUDA.
            _write(lib / f"{name}.so.{version}", source.read_bytes(), mode=0o755)
            _link(lib / f"{name}.so.1", f"{name}.so.{version}")
        _write(lib / NVML_CONFIG_NAME, nvml_config.render(cfg))
    for name, module in _STAND_INS.items():
        # A SIGUSR1/SIGHUP that lands while the interpreter starts must not kill the daemon:
        # ignored before exec, they stay ignored until the stand-in installs its handlers.
        trap = "trap '' USR1 HUP\n" if name == "nvidia-imex" else ""
        script = f'#!/bin/sh\n{trap}exec {python} -m {module} "$@"\n'
        _write(root / BIN_DIR / name, script, mode=0o755)
    _write(root / BIN_DIR / "nvidia-imex-ctl", ctl_script(python), mode=0o755)
    firmware = root / "lib/firmware/nvidia" / version
    for blob in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        if not (firmware / blob).exists():
            _write(firmware / blob, "simulated GSP firmware placeholder\n")
    proc = node_root / "proc"
    _write(proc / "devices", proc_devices())
    _proc_driver(proc, cfg)
    made: list[str] = []
    if os.geteuid() == 0:
        for path, (major, minor) in device_nodes(len(cfg.gpus)).items():
            for base in (root, node_root):
                _mknod(base / path.lstrip("/"), major, minor)
            made.append(path)
    return Layout(driver_root=root, device_nodes=tuple(made))
