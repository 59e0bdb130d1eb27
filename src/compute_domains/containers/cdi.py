"""This runtime's CDI step: CDI devices injected into a container's env, device nodes and mounts.

A container runtime with CDI support (containerd over the CDI library) resolves the requested
device names in the loaded specs and applies their edits to the container's config, the
env and mounts it already has included. Resolving and the merge rules are ``infra.cdispec``'s;
a device node a spec gives by path alone is completed (type, major, minor, mode) from the host's
device at that path, which ``host`` says where to find. This module only turns the result into
``runtime`` types: a node's mode is the spec's or the host node's, else the OCI default
``0o666``; a read-only mount is one with the ``ro`` option. The simulated nodes' runtime
(``sim.kubelet.cdi``) and ``validate``'s workload containers both inject through ``inject``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from compute_domains.containers import runtime
from compute_domains.infra import cdispec

DEFAULT_MODE = 0o666
"""File mode of a device node neither the spec nor the host node gives one (the OCI default)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Injected:
    """A container's config once its CDI devices are injected."""

    env: dict[str, str]
    devices: tuple[runtime.DeviceNode, ...]
    mounts: tuple[runtime.Mount, ...]


def inject(
    ids: Sequence[str],
    specs: Iterable[cdispec.Spec],
    *,
    host: cdispec.Host,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[runtime.Mount] = (),
) -> Injected:
    """``env`` and ``mounts`` with the CDI devices ``ids`` injected from ``specs``.

    Args:
        ids: CDI device names in the caller's order (a name listed twice is injected once).
        specs: the loaded CDI specs.
        host: where host device nodes and mount sources lie.
        env: the container's env before CDI (an edit for the same name replaces the entry).
        mounts: the container's mounts before CDI (one at a CDI mount's path is replaced).

    Raises:
        cdispec.UnresolvableDevicesError: a name resolves to no device.
        cdispec.InjectionError: a device node has no host device to complete it from.
    """
    base = cdispec.OciConfig(
        env=tuple(f"{name}={value}" for name, value in (env or {}).items()),
        mounts=tuple(_cdi_mount(m) for m in mounts),
    )
    applied = cdispec.inject(ids, specs, base, host=host)
    return Injected(
        env=applied.env_map(),
        devices=tuple(_runtime_node(n) for n in applied.device_nodes),
        mounts=tuple(_runtime_mount(m) for m in applied.mounts),
    )


def _runtime_node(node: cdispec.DeviceNode) -> runtime.DeviceNode:
    # ``inject`` completed the node: type and numbers are set, the mode when spec or host had one.
    return runtime.DeviceNode(
        path=node.path,
        major=node.major or 0,
        minor=node.minor or 0,
        type=node.type or "c",
        mode=node.file_mode if node.file_mode is not None else DEFAULT_MODE,
    )


def _cdi_mount(mount: runtime.Mount) -> cdispec.Mount:
    return cdispec.Mount(
        host_path=mount.source,
        container_path=mount.target,
        options=("ro",) if mount.readonly else (),
    )


def _runtime_mount(mount: cdispec.Mount) -> runtime.Mount:
    return runtime.Mount(
        source=mount.host_path, target=mount.container_path, readonly="ro" in mount.options
    )
