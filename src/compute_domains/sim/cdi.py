"""The runtime's CDI step on a simulated node: device names → container edits on the node's host.

A container runtime (containerd's CDI support over the CDI library) loads the specs of the
host's ``/etc/cdi`` and ``/var/run/cdi``, merges the edits of the requested devices and applies
them to the container. Applying a device node that names only a ``path`` (optionally a
``hostPath``) completes it from the host device it points at, as the library's
``fillMissingInfo`` does: unless a type and a non-zero major are given, it ``lstat``s
``hostPath`` (else ``path``) and takes the type (``c``, ``b`` or ``p``) and, when the major is
unset, major and minor from there. NVIDIA's base spec (nvcdi "management" mode) gives its
``/dev/nvidia*`` nodes this way.

The node root plays the host's filesystem: host path P is ``<node root>/P`` when that exists
(the node's driver root and its ``/dev``), else this machine's P (``/dev/null`` and the other
nodes every host has). Mount host paths always map into the node root. Every failure is the
runtime's ``CDI device injection failed: ...`` and fails the container's creation.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from compute_domains.infra import cdispec
from compute_domains.sim import pods, runtime

_DEFAULT_MODE = 0o666
"""File mode of a device node the spec gives none for (the OCI runtime's default)."""


def host_path(node_root: Path, path: str) -> Path:
    """Where host path ``path`` of the node lies on this machine."""
    inside = node_root / path.lstrip("/")
    return inside if os.path.lexists(inside) else Path(path)


def _go_error(err: OSError, path: str) -> str:
    # Go's message for a failed lstat: "lstat <path>: no such file or directory".
    reason = os.strerror(err.errno or errno.EIO)
    return f"lstat {path}: {reason[:1].lower()}{reason[1:]}"


def _host_device(node_root: Path, path: str) -> tuple[str, int, int]:
    """(type, major, minor) of the node's host device at ``path``; ValueError with the
    library's message when it is missing or no device node."""
    try:
        st = host_path(node_root, path).lstat()
    except OSError as err:
        raise ValueError(
            f"failed to stat CDI host device {_quote(path)}: {_go_error(err, path)}"
        ) from err
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    elif stat.S_ISFIFO(st.st_mode):
        kind = "p"
    else:
        raise ValueError(f"failed to stat CDI host device {_quote(path)}: not a device node")
    return kind, os.major(st.st_rdev), os.minor(st.st_rdev)


def _quote(text: str) -> str:
    """Go's ``%q`` for the paths that appear in the library's messages."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def device_node(node_root: Path, node: cdispec.DeviceNode) -> runtime.DeviceNode:
    """A CDI device node completed from the node's host device where the spec leaves gaps."""
    host = node.host_path or node.path
    kind = "c" if node.type == "u" else (node.type or "")
    major, minor = node.major or 0, node.minor or 0
    if not kind or (major == 0 and kind != "p"):
        found, host_major, host_minor = _host_device(node_root, host)
        if kind and kind != found:
            raise ValueError(
                f"CDI device ({_quote(node.path)}, {_quote(host)}), host type mismatch "
                f"({node.type}, {found})"
            )
        kind = found
        if major == 0 and kind != "p":
            major, minor = host_major, host_minor
    mode = node.file_mode if node.file_mode is not None else _DEFAULT_MODE
    return runtime.DeviceNode(path=node.path, major=major, minor=minor, type=kind, mode=mode)


def resolve(
    node_root: Path, ids: list[str]
) -> tuple[dict[str, str], list[runtime.DeviceNode], list[runtime.Mount]]:
    """Env, device nodes and mounts the CDI devices ``ids`` give a container on this node.

    As the CDI library applies edits to an OCI spec, a later device node or mount replaces an
    earlier one at the same container path. Raises ``pods.CreateError`` with the runtime's
    message when a name resolves to no spec or a device node to no host device.
    """
    specs, _bad = cdispec.load_spec_dirs([node_root / "etc/cdi", node_root / "var/run/cdi"])
    try:
        edits = cdispec.container_edits_for(ids, specs)
    except cdispec.UnresolvableDevicesError as err:
        raise pods.CreateError(
            f"CDI device injection failed: unresolvable CDI devices {', '.join(ids)}"
        ) from err
    nodes: dict[str, runtime.DeviceNode] = {}
    for n in edits.device_nodes:
        try:
            nodes[n.path] = device_node(node_root, n)
        except ValueError as err:
            raise pods.CreateError(
                f"CDI device injection failed: failed to inject devices: {err}"
            ) from err
    mounts = {
        m.container_path: runtime.Mount(
            source=str(node_root / m.host_path.lstrip("/")),
            target=m.container_path,
            readonly="ro" in m.options,
        )
        for m in edits.mounts
    }
    return edits.env_map(), list(nodes.values()), list(mounts.values())
