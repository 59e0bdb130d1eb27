"""Read a GPU's NVLink fabric info with NVML's C structure layout, whatever the binding declares.

The clique ID comes from ``nvmlDeviceGetGpuFabricInfo`` (or its versioned twin). nvidia-ml-py's
own ctypes mirror of that structure is not to be trusted: every release from 11.525 (the oldest
checked) through 13.610.43 declares ``c_nvmlGpuFabricInfo_t.clusterUuid`` with
``NVML_DEVICE_UUID_BUFFER_SIZE`` (80) bytes instead of ``NVML_GPU_FABRIC_UUID_LEN`` (16), so
``status``, ``cliqueId`` and ``state`` are read 64 bytes past where the library wrote them
(state reads 0, NOT_SUPPORTED, and the node silently has no clique); 12.550 to 12.560 declare
the versioned one the same way, and releases before 13.580 type the UUID as ``c_char``, which
truncates it at its first zero byte.
13.615.71 is the first release with the right layout.

So this module declares the structures as ``nvml.h`` does (``FabricInfoV1``: the unversioned
``nvmlGpuFabricInfo_t``; ``FabricInfoV2``: ``nvmlGpuFabricInfo_v2_t``, the version discovery
asks for) and calls the C entry point itself, found through the binding's own symbol lookup
(``_nvmlGetFunctionPointer``: nvidia-ml-py's, present in every release checked, 11.525.150 to
13.615.71; ``plugin.nvmllib`` offers the same). Only that lookup and ``nvmlErrorString`` are
taken from the binding. A binding without the lookup is refused (``BindingError``).

``check_binding`` tells how far the binding's own declarations differ from the C layout; the
plugin logs it at start and ``validate node`` reports it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.metadata
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from compute_domains.infra import errors

UUID_LEN = 16
"""``NVML_GPU_FABRIC_UUID_LEN``."""
LOOKUP = "_nvmlGetFunctionPointer"
"""The binding's function that returns a C entry point of the library it loaded."""


class FabricInfoV1(ctypes.Structure):
    """``nvmlGpuFabricInfo_t`` (28 bytes): the unversioned call's output."""

    _fields_ = (
        ("clusterUuid", ctypes.c_ubyte * UUID_LEN),
        ("status", ctypes.c_uint),  # nvmlReturn_t
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),  # nvmlGpuFabricState_t, then 3 bytes of padding
    )


class FabricInfoV2(ctypes.Structure):
    """``nvmlGpuFabricInfo_v2_t`` (36 bytes): the versioned call's output, version 2."""

    _fields_ = (
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_ubyte * UUID_LEN),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
    )


VERSION_2 = ctypes.sizeof(FabricInfoV2) | (2 << 24)
"""``nvmlGpuFabricInfo_v2`` (``NVML_STRUCT_VERSION(GpuFabricInfo, 2)``, 0x02000024)."""
_LAYOUT_FIELDS = ("clusterUuid", "status", "cliqueId", "state")


class BindingError(errors.ConfigError):
    """The NVML binding offers no way to call the C entry point with our own structure."""


class Binding(Protocol):
    """What the fabric read needs from an NVML binding (``pynvml`` or ``nvmllib.LibraryNvml``)."""

    NVMLError: type[Exception]

    def _nvmlGetFunctionPointer(self, name: str) -> Callable[..., int]: ...
    def nvmlErrorString(self, result: int) -> str | bytes: ...  # noqa: D102


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Reading:
    """One GPU's fabric answer, decoded from the C layout."""

    cluster_uuid: bytes
    status: int
    clique_id: int
    state: int


class CallError(Exception):
    """The C call returned ``value`` (an ``nvmlReturn_t`` other than success)."""

    def __init__(self, value: int, message: str) -> None:
        super().__init__(message)
        self.value = value


def read(nvml: Binding, handle: Any, *, versioned: bool) -> Reading:
    """Call ``nvmlDeviceGetGpuFabricInfo`` (or ``…V`` with version 2) and decode its answer.

    Raises:
        CallError: the call returned an error (``value`` is its code).
        nvml.NVMLError: the binding's lookup failed (e.g. ``NVML_ERROR_FUNCTION_NOT_FOUND``).
        BindingError: the binding has no function lookup.
    """
    info: FabricInfoV1 | FabricInfoV2
    if versioned:
        info, name = FabricInfoV2(version=VERSION_2), "nvmlDeviceGetGpuFabricInfoV"
    else:
        info, name = FabricInfoV1(), "nvmlDeviceGetGpuFabricInfo"
    rc = int(_lookup(nvml)(name)(handle, ctypes.byref(info)))
    if rc != 0:  # NVML_SUCCESS
        try:
            text = nvml.nvmlErrorString(rc)
        except nvml.NVMLError:
            text = f"NVML error {rc}"
        message = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
        raise CallError(rc, f"{name}: {message}")
    return Reading(
        cluster_uuid=bytes(info.clusterUuid),
        status=int(info.status),
        clique_id=int(info.cliqueId),
        state=int(info.state),
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BindingCheck:
    """How the NVML binding compares with the C layout (``check_binding``)."""

    version: str
    """The binding's version (``nvidia-ml-py 13.615.71``), or what it is when not that."""
    usable: bool
    """Whether the binding has the C entry-point lookup the fabric read needs."""
    differences: tuple[str, ...]
    """Where the binding's own fabric structures differ from ``nvml.h`` (not used either way)."""

    def summary(self) -> str:
        """One line for logs and reports."""
        if not self.usable:
            return (
                f"{self.version}: no {LOOKUP}; fabric info cannot be read with the C layout, "
                "refusing to start (install nvidia-ml-py >= 13.615.71)"
            )
        if not self.differences:
            return f"{self.version}: fabric structures match nvml.h; read with the C layout"
        return (
            f"{self.version}: its fabric structures differ from nvml.h "
            f"({'; '.join(self.differences)}); not used, fabric info read with the C layout"
        )


def check_binding(nvml: object) -> BindingCheck:
    """Compare the binding's declared fabric structures with ``nvml.h``'s (pure; no NVML call)."""
    differences: list[str] = []
    for attr, ours in (
        ("c_nvmlGpuFabricInfo_t", FabricInfoV1),
        ("c_nvmlGpuFabricInfoV_t", FabricInfoV2),
    ):
        theirs = getattr(nvml, attr, None)
        if isinstance(theirs, type) and issubclass(theirs, ctypes.Structure):
            differences.extend(f"{attr}: {d}" for d in _compare(theirs, ours))
    return BindingCheck(
        version=binding_version(nvml),
        usable=callable(getattr(nvml, LOOKUP, None)),
        differences=tuple(differences),
    )


def require_usable(nvml: object) -> None:
    """Refuse a binding the fabric read cannot use.

    Raises:
        BindingError: the binding has no C entry-point lookup.
    """
    check = check_binding(nvml)
    if not check.usable:
        raise BindingError(f"NVML binding {check.summary()}")


def binding_version(nvml: object) -> str:
    """``nvidia-ml-py <version>`` for the installed ``pynvml`` module; for a ``pynvml`` loaded
    from elsewhere (a copy on ``PYTHONPATH``) its file; the class name for other bindings."""
    if not isinstance(nvml, types.ModuleType):
        return str(getattr(nvml, "binding_version", type(nvml).__qualname__))
    where = getattr(nvml, "__file__", None)
    try:
        dist = importlib.metadata.distribution("nvidia-ml-py")
    except importlib.metadata.PackageNotFoundError:
        dist = None
    # The installed distribution's number says nothing about a module it did not install.
    if dist is not None and where is not None and _installs(dist, Path(where)):
        return f"nvidia-ml-py {dist.version}"
    return f"{nvml.__name__} from {where} (version unknown)"


def _installs(dist: importlib.metadata.Distribution, module: Path) -> bool:
    target = module.resolve()
    return any(Path(str(dist.locate_file(f))).resolve() == target for f in dist.files or ())


def _compare(theirs: type[ctypes.Structure], ours: type[ctypes.Structure]) -> list[str]:
    # Offsets and the UUID's size and type decide what is read; a 4-byte ``state`` over the C
    # byte and its padding (every release so far) reads the same value, so its size is not news.
    out = []
    if ctypes.sizeof(theirs) != ctypes.sizeof(ours):
        out.append(f"{ctypes.sizeof(theirs)} bytes, C {ctypes.sizeof(ours)}")
    for field in _LAYOUT_FIELDS:
        got, want = getattr(theirs, field, None), getattr(ours, field)
        if got is None:
            out.append(f"no {field}")
        elif got.offset != want.offset:
            out.append(f"{field} at offset {got.offset}, C {want.offset}")
    got = getattr(theirs, "clusterUuid", None)
    if got is not None and got.size != UUID_LEN:
        out.append(f"clusterUuid {got.size} bytes, C {UUID_LEN}")
    declared = dict((f[0], f[1]) for f in getattr(theirs, "_fields_", ()))
    if getattr(declared.get("clusterUuid"), "_type_", None) is ctypes.c_char:
        out.append("clusterUuid typed c_char (reads stop at its first zero byte)")
    return out


def _lookup(nvml: Binding) -> Callable[[str], Callable[..., int]]:
    lookup = getattr(nvml, LOOKUP, None)
    if not callable(lookup):
        raise BindingError(f"NVML binding {binding_version(nvml)} has no {LOOKUP}")
    return lookup  # type: ignore[no-any-return]
