"""The runtime's CDI step on a simulated node: CDI device names → the container's edited config.

A container runtime (containerd's CDI support over the CDI library) loads the specs of the
host's ``/etc/cdi`` and ``/var/run/cdi``, resolves the requested devices and applies their
edits to the container's config (its env and mounts from the pod included). Resolving and the
merge rules are ``infra.cdispec``'s and the conversion to the runtime's types is
``containers.cdi``'s, both shared with ``validate``; this module says only where a simulated
node's specs and host paths lie.

The node root plays the host's filesystem: a host device node P is ``<node root>/P`` when that
exists (the node's driver root and its ``/dev``), else this machine's P (``/dev/null`` and the
other nodes every host has); NVIDIA's base spec (nvcdi "management" mode) gives its
``/dev/nvidia*`` nodes by path alone, completed from there. Mount host paths always map into the
node root. Hooks are resolved but not run: the simulated runtime has no OCI hook stage (our base
spec needs none, which is why it mounts libraries by both names). Every failure is the runtime's
``CDI device injection failed: ...`` and fails the container's creation.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from compute_domains.containers import cdi as runtime_cdi
from compute_domains.containers import runtime
from compute_domains.infra import cdispec
from compute_domains.sim.kubelet import errors


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeHost:
    """A simulated node's host paths as they lie on this machine (``cdispec.Host``)."""

    root: Path
    """The node root."""

    def device_path(self, path: str) -> Path:
        """``<root>/<path>`` when it exists, else this machine's ``path``."""
        inside = self.root / path.lstrip("/")
        return inside if os.path.lexists(inside) else Path(path)

    def mount_source(self, path: str) -> str:
        """``<root>/<path>``: a node's files are its own, never this machine's."""
        return str(self.root / path.lstrip("/"))


def resolve(
    node_root: Path,
    ids: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[runtime.Mount] = (),
) -> tuple[dict[str, str], list[runtime.DeviceNode], list[runtime.Mount]]:
    """The container's env, device nodes and mounts once the CDI devices ``ids`` are injected.

    Args:
        node_root: the node's root folder (its ``etc/cdi`` and ``var/run/cdi`` hold the specs).
        ids: CDI device names in the kubelet's order (a name listed twice is injected once).
        env: the container's env before CDI (an edit for the same name replaces the entry).
        mounts: the container's mounts before CDI (one at a CDI mount's path is replaced).

    Raises:
        errors.CreateError: with the runtime's message, when a name resolves to no device or a
            device node to no host device.
    """
    specs, _bad = cdispec.load_spec_dirs([node_root / "etc/cdi", node_root / "var/run/cdi"])
    try:
        injected = runtime_cdi.inject(
            ids, specs, host=NodeHost(root=node_root), env=env, mounts=mounts
        )
    except (cdispec.UnresolvableDevicesError, cdispec.InjectionError) as err:
        raise errors.CreateError(f"CDI device injection failed: {err}") from err
    return injected.env, list(injected.devices), list(injected.mounts)
