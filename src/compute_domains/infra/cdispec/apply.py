"""Apply merged CDI edits to a container's config, exactly as a runtime's CDI library does.

This is the one place the CDI merge rules live (library v1.1.0 ``ContainerEdits.Apply`` and
``fillMissingInfo``, runtime-tools' generator, containerd's ``WithCDI``); the simulated runtime
and ``validate`` both call ``inject``. Edits apply in the library's order, to a copy:
- env: an entry replaces the one of the same name in place (the container's own or an earlier
  edit's), else it is appended: the last writer wins.
- device nodes: each is completed from its host node (below), then the one already at the same
  container path is removed and the new one appended. ``b``/``c`` nodes get the cgroup access
  ``rwm`` unless the spec narrows it; uid/gid default to the container user's when non-root.
- mounts: the one already at the same container path is removed and the new one appended; then,
  only when the edits had mounts, all mounts are stably sorted by the number of ``/`` in the
  cleaned destination (parents before children).
- hooks: appended. additional GIDs: appended unless zero or already there.
Completing a node (``fillMissingInfo``): ``hostPath`` defaults to ``path``; the host node is
``lstat``ed; its permission bits fill a missing ``fileMode``; unless the node already has a type
and a non-zero major (a FIFO needs no major) the host's type and, when the major is unset, its
major and minor fill the gaps, and a given type that differs from the host's is an error. A host
node that cannot be read fails only a node that is not already complete.
``inject`` adds the runtime's step before the library's: a device requested twice is injected
once (containerd's ``WithCDI``), so its hooks are not run twice.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import posixpath
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from compute_domains.infra.cdispec import model, resolve

_T = TypeVar("_T")
_DEFAULT_ACCESS = "rwm"
"""Cgroup access of a block or char device whose spec gives no ``permissions``."""


class Host(Protocol):
    """Where the host paths a spec names lie, as seen from the process applying the edits."""

    def device_path(self, path: str) -> Path:
        """The file to ``lstat`` for host device node ``path``."""
        ...

    def mount_source(self, path: str) -> str:
        """The source to bind for a mount of host path ``path``."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RootedHost:
    """A host whose filesystem is the folder ``root`` (``/``: this machine)."""

    root: Path = Path("/")

    def device_path(self, path: str) -> Path:
        """``<root>/<path>``."""
        return self.root / path.lstrip("/")

    def mount_source(self, path: str) -> str:
        """``<root>/<path>``."""
        return str(self.root / path.lstrip("/"))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class OciConfig:
    """The part of a container's OCI config that CDI edits change.

    Device nodes here are complete once applied: ``host_path``, ``type``, ``major`` and
    ``minor`` set; ``file_mode`` None means the runtime's default.
    """

    env: tuple[str, ...] = ()
    device_nodes: tuple[model.DeviceNode, ...] = ()
    mounts: tuple[model.Mount, ...] = ()
    """Sources are on this machine (already through ``Host.mount_source``)."""
    hooks: tuple[model.Hook, ...] = ()
    additional_gids: tuple[int, ...] = ()
    uid: int = 0
    """The container process's user: device nodes without a uid get it when non-zero."""
    gid: int = 0
    """The container process's group: device nodes without a gid get it when non-zero."""

    def env_map(self) -> dict[str, str]:
        """The env as a mapping (names are unique after ``apply_edits``)."""
        return dict(entry.split("=", 1) for entry in self.env)


def inject(
    device_ids: Sequence[str],
    specs: Iterable[model.Spec],
    base: OciConfig | None = None,
    *,
    host: Host | None = None,
) -> OciConfig:
    """``base`` with the CDI devices ``device_ids`` injected, as a container runtime does it.

    Raises:
        UnresolvableDevicesError: a name resolves to no device; nothing is applied.
        InjectionError: the edits cannot be applied (e.g. a host device node is missing).
    """
    unique = list(dict.fromkeys(device_ids))
    return apply_edits(resolve.container_edits_for(unique, specs), base, host=host)


def apply_edits(
    edits: model.ContainerEdits, base: OciConfig | None = None, *, host: Host | None = None
) -> OciConfig:
    """``base`` with ``edits`` applied by the library's rules (module docstring).

    Raises:
        InjectionError: a device node cannot be completed from its host node.
    """
    base = base or OciConfig()
    host = host or RootedHost()
    env = _apply_env(base.env, edits.env)
    nodes = list(base.device_nodes)
    for node in edits.device_nodes:
        done = _with_user(complete_node(node, host), base)
        _remove_first(nodes, _node_path, done.path)
        nodes.append(done)
    mounts = list(base.mounts)
    for mount in edits.mounts:
        _remove_first(mounts, _mount_path, mount.container_path)
        mounts.append(dataclasses.replace(mount, host_path=host.mount_source(mount.host_path)))
    if edits.mounts:
        mounts.sort(key=lambda m: posixpath.normpath(m.container_path).count("/"))
    gids = list(base.additional_gids)
    gids += [g for g in dict.fromkeys(edits.additional_gids) if g and g not in gids]
    return dataclasses.replace(
        base,
        env=env,
        device_nodes=tuple(nodes),
        mounts=tuple(mounts),
        hooks=base.hooks + edits.hooks,
        additional_gids=tuple(gids),
    )


def complete_node(node: model.DeviceNode, host: Host) -> model.DeviceNode:
    """``node`` with its gaps filled from its host node (the library's ``fillMissingInfo``).

    Raises:
        InjectionError: the host node is needed but missing, no device, or of another type.
    """
    host_path = node.host_path or node.path
    kind, major, minor = node.type or "", node.major or 0, node.minor or 0
    minimal = bool(kind) and (major != 0 or kind == "p")
    try:
        found, host_major, host_minor, host_mode = _device_info(host.device_path(host_path))
    except (OSError, _NotADeviceError) as err:
        if not minimal:  # a vendor may describe a node fully; then the host node is optional
            raise model.InjectionError(
                f"failed to inject devices: failed to stat CDI host device {_quote(host_path)}: "
                f"{_reason(err)}"
            ) from err
        return _done(node, host_path, kind, major, minor, node.file_mode)
    mode = node.file_mode if node.file_mode is not None else host_mode
    if minimal:
        return _done(node, host_path, kind, major, minor, mode)
    if kind and kind != found:
        raise model.InjectionError(
            f"failed to inject devices: CDI device ({_quote(node.path)}, {_quote(host_path)}), "
            f"host type mismatch ({kind}, {found})"
        )
    if found != "p" and major == 0:
        major, minor = host_major, host_minor
    return _done(node, host_path, found, major, minor, mode)


class _NotADeviceError(Exception):
    """The host path exists but is no device node."""


def _device_info(path: Path) -> tuple[str, int, int, int]:
    """(type, major, minor, permission bits) of the device node at ``path`` (not followed)."""
    st = path.lstat()
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    elif stat.S_ISFIFO(st.st_mode):
        kind = "p"
    else:
        raise _NotADeviceError("not a device node")
    return kind, os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode)


def _done(
    node: model.DeviceNode, host_path: str, kind: str, major: int, minor: int, mode: int | None
) -> model.DeviceNode:
    access = node.permissions or (_DEFAULT_ACCESS if kind in ("b", "c") else None)
    return dataclasses.replace(
        node,
        host_path=host_path,
        type=kind,
        major=major,
        minor=minor,
        file_mode=mode,
        permissions=access,
    )


def _with_user(node: model.DeviceNode, base: OciConfig) -> model.DeviceNode:
    uid = node.uid if node.uid is not None else (base.uid or None)
    gid = node.gid if node.gid is not None else (base.gid or None)
    return dataclasses.replace(node, uid=uid, gid=gid)


def _apply_env(base: tuple[str, ...], edits: tuple[str, ...]) -> tuple[str, ...]:
    env = list(base)
    # runtime-tools' generator indexes the existing env by name, the last of duplicates winning.
    at = {entry.split("=", 1)[0]: i for i, entry in enumerate(env)}
    for entry in edits:
        name = entry.split("=", 1)[0]
        if name in at:
            env[at[name]] = entry
        else:
            at[name] = len(env)
            env.append(entry)
    return tuple(env)


def _remove_first(items: list[_T], key: Callable[[_T], str], path: str) -> None:
    """Drop the first item at container ``path`` (runtime-tools' Remove{Device,Mount})."""
    at = next((i for i, item in enumerate(items) if key(item) == path), None)
    if at is not None:
        del items[at]


def _node_path(node: model.DeviceNode) -> str:
    return node.path


def _mount_path(mount: model.Mount) -> str:
    return mount.container_path


def _reason(err: BaseException) -> str:
    # Go prints a bare errno (``unix.Lstat``'s error) as its lower-case strerror text.
    if isinstance(err, OSError):
        text = os.strerror(err.errno or errno.EIO)
        return text[:1].lower() + text[1:]
    return str(err)


def _quote(text: str) -> str:
    """Go's ``%q`` for the paths that appear in the library's messages."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
