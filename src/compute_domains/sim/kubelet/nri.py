"""The container runtime's NRI hooks on a simulated node, and each pod's network-namespace view.

A real runtime (containerd) calls its NRI plugins at ``RunPodSandbox``, ``CreateContainer`` and
``StopPodSandbox``; DRANET is such a plugin (it moves NICs into the pod's network namespace and
adds RDMA character devices to containers). The simulated kubelet plays the runtime here: it
calls the node's ``Plugin``s at the same points, in the same order relative to DRA
(prepare → run sandbox → create containers → stop sandbox → unprepare). The protocol between
runtime and plugin is in-process (NRI's ttrpc socket has no counterpart to test here).

Pods share the machine's network namespace in the simulator (docs/simulator.md), so a pod's
network namespace is a *view*: ``<node root>/var/run/netns/<pod uid>/`` holds the pod's
``/sys/class/net`` entries (``lo``, ``eth0`` and whatever a plugin moved in), and every
container of a pod without ``hostNetwork`` sees it at ``/sys/class/net``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Protocol

from compute_domains.containers import runtime

NETNS_DIR = "var/run/netns"
"""Under the node root: one folder per pod (``<pod uid>``), the pod's ``/sys/class/net``."""
SYS_CLASS_NET = "/sys/class/net"


class NriError(Exception):
    """A plugin refused the sandbox or the container (the runtime's call fails)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Sandbox:
    """What a plugin learns of a pod sandbox (NRI's ``PodSandbox``)."""

    uid: str
    namespace: str
    name: str
    ip: str
    netns: Path | None
    """Host path of the pod's network-namespace view; None with ``hostNetwork``."""


@dataclasses.dataclass(kw_only=True, slots=True)
class Adjustment:
    """What a plugin adds to a container (NRI's ``ContainerAdjustment``)."""

    devices: list[runtime.DeviceNode] = dataclasses.field(default_factory=list)
    mounts: list[runtime.Mount] = dataclasses.field(default_factory=list)
    env: dict[str, str] = dataclasses.field(default_factory=dict)


class Plugin(Protocol):
    """An NRI plugin of a node's runtime."""

    name: str

    async def run_pod_sandbox(self, sandbox: Sandbox) -> None:
        """The sandbox is being started; raise ``NriError`` to fail it."""

    async def create_container(self, sandbox: Sandbox, container: str) -> Adjustment:
        """A container of the sandbox is being created; its adjustment."""

    async def stop_pod_sandbox(self, sandbox: Sandbox) -> None:
        """The sandbox is being stopped (its containers are gone)."""


def _netdev(folder: Path, mac: str, mtu: int, state: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "address").write_text(mac + "\n")
    (folder / "mtu").write_text(f"{mtu}\n")
    (folder / "operstate").write_text(state + "\n")


def make_netns(node_root: Path, pod_uid: str, pod_ip: str) -> Path:
    """Create the pod's network-namespace view with ``lo`` and ``eth0`` (blocking); its path."""
    view = node_root / NETNS_DIR / pod_uid
    _netdev(view / "lo", "00:00:00:00:00:00", 65536, "unknown")
    # A CNI's veth end: a locally administered MAC derived from the pod address.
    octets = [int(o) for o in pod_ip.split(".")]
    _netdev(view / "eth0", "0a:58:" + ":".join(f"{o:02x}" for o in octets), 1500, "up")
    return view


def remove_netns(node_root: Path, pod_uid: str) -> None:
    """Delete the pod's network-namespace view (blocking).

    As the kernel does when a network namespace is destroyed, the netdevs a plugin moved into it
    (every entry but the view's own ``lo`` and ``eth0``, whose veth pair dies with it) go back
    to the host's ``/sys/class/net`` first: a sandbox no plugin stopped (its pod deleted while
    the node was down) must not keep a NIC from the next pod."""
    view = node_root / NETNS_DIR / pod_uid
    host = node_root / SYS_CLASS_NET.lstrip("/")
    for entry in sorted(view.iterdir()) if view.is_dir() else []:
        if entry.name not in ("lo", "eth0") and entry.is_dir() and not (host / entry.name).exists():
            host.mkdir(parents=True, exist_ok=True)
            os.rename(entry, host / entry.name)
    shutil.rmtree(view, ignore_errors=True)
