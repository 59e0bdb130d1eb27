"""The CDI spec as typed data: devices, their container edits, and the errors of the CDI steps.

Field names are Python's; ``render`` and ``parse`` translate them to and from the spec's JSON
keys (``host_path`` ↔ ``hostPath``). The types are plain frozen data with no IO and no
validation of their own: ``parse`` validates what it reads, ``names`` checks names and versions.

A ``DeviceNode`` is both what a spec says (gaps allowed: ``path`` alone is a valid node) and,
after ``apply``, what a runtime creates (every gap filled from the host device).
``intelRdt`` and ``netDevices`` are not modelled (``parse`` accepts them only to check versions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from compute_domains.infra import errors


class CdiSpecError(errors.PermanentError):
    """A spec document or a CDI device name is invalid."""


class UnresolvableDevicesError(errors.PermanentError):
    """Some requested CDI device names are defined by no spec (or by two of equal priority).

    The message is the CDI library's (``unresolvable CDI devices <names>``) and names only the
    devices that failed, in request order.
    """

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(f"unresolvable CDI devices {', '.join(names)}")
        self.names = tuple(names)


class InjectionError(errors.PermanentError):
    """Resolved edits cannot be applied to a container (e.g. a device node without a host node).

    The message is the CDI library's ``InjectDevices`` error (``failed to inject devices: ...``).
    """


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DeviceNode:
    """A device node to create in the container (``deviceNodes[]``)."""

    path: str
    """Path inside the container."""
    host_path: str | None = None
    """Host node to copy missing facts from; None means ``path`` (CDI 0.5.0)."""
    type: str | None = None
    """``c``, ``b``, ``u`` or ``p``; None (or "") means: take it from the host node."""
    major: int | None = None
    """None or 0 (except for a FIFO) means: take major and minor from the host node."""
    minor: int | None = None
    file_mode: int | None = None
    """Permission bits of the node; None: the host node's (CDI 1.1), else the runtime default."""
    permissions: str | None = None
    """Cgroup access (letters of ``rwm``); unset means ``rwm`` for block and char devices."""
    uid: int | None = None
    gid: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Mount:
    """A mount to add to the container (``mounts[]``)."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Hook:
    """An OCI hook (``hooks[]``)."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ContainerEdits:
    """Changes a CDI device (or, spec-level, every device of a spec) makes to a container."""

    env: tuple[str, ...] = ()
    """``NAME=VALUE`` entries; applied, a later entry for the same name wins."""
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    additional_gids: tuple[int, ...] = ()

    def is_empty(self) -> bool:
        """Whether applying these edits would change nothing."""
        return not (
            self.env or self.device_nodes or self.mounts or self.hooks or self.additional_gids
        )

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        """``self`` followed by ``other``, each list concatenated (the library's ``Append``)."""
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            mounts=self.mounts + other.mounts,
            hooks=self.hooks + other.hooks,
            additional_gids=self.additional_gids + other.additional_gids,
        )

    def env_map(self) -> dict[str, str]:
        """The env entries as a mapping, later entries replacing earlier ones."""
        return dict(entry.split("=", 1) for entry in self.env)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Device:
    """One named device of a spec."""

    name: str
    edits: ContainerEdits
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Spec:
    """One CDI spec file's content."""

    version: str
    """``cdiVersion`` without a leading ``v``."""
    kind: str
    """``<vendor>/<class>``."""
    devices: tuple[Device, ...]
    edits: ContainerEdits = ContainerEdits()
    """Spec-level ``containerEdits``: applied once with the first requested device of the spec."""
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    priority: int = 0
    """Index of the spec's directory in the runtime's list; a higher index wins conflicts."""

    def qualified_name(self, device: str) -> str:
        """The fully-qualified CDI name ``<vendor>/<class>=<device>``."""
        return f"{self.kind}={device}"
