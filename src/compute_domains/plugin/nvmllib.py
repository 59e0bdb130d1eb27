"""NVML through one named library file: a ``nodeinfo.Nvml`` that is an object, not the process.

``pynvml`` loads one ``libnvidia-ml.so.1`` per process and keeps it in module globals, so a
process can only ever see one node's NVML. :class:`LibraryNvml` binds the same C entry points
of a library file it is given (``ctypes.CDLL`` on that path, local symbols), with ``pynvml``'s
device and PCI structures (fabric info uses ``plugin.fabricinfo``'s C layout, through the same
symbol lookup nvidia-ml-py offers, ``_nvmlGetFunctionPointer``), so several plugin instances
in one process (the simulator's virtual nodes) each ask their own node's library. The calls
and their order are exactly those discovery makes through ``pynvml``; only the binding differs.
The library is found the way the dynamic loader finds it for a plugin process: the first
``libnvidia-ml.so.1`` on its ``LD_LIBRARY_PATH`` (:func:`find_library`).

Distinct files are distinct libraries to the loader (it tells loaded objects apart by device and
inode), so each node's copy has its own state.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type information

LIBRARY_NAME = "libnvidia-ml.so.1"
_NAME_BUFFER = 96
_VERSION_BUFFER = 80


class LibraryNvmlError(Exception):
    """An NVML call failed; ``value`` is its ``nvmlReturn_t`` (as ``pynvml.NVMLError``)."""

    def __init__(self, value: int, message: str) -> None:
        super().__init__(message)
        self.value = value


def find_library(search_path: Iterable[Path]) -> Path | None:
    """The first ``libnvidia-ml.so.1`` in ``search_path`` (folders in order); None if none."""
    for folder in search_path:
        candidate = folder / LIBRARY_NAME
        if candidate.exists():
            return candidate
    return None


class LibraryNvml:
    """The ``nodeinfo.Nvml`` surface over one library file (loaded at the first call)."""

    NVMLError: type[Exception] = LibraryNvmlError
    NVML_SUCCESS: int = pynvml.NVML_SUCCESS
    NVML_ERROR_NOT_SUPPORTED: int = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_FUNCTION_NOT_FOUND: int = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_INIT_FLAG_NO_GPUS: int = pynvml.NVML_INIT_FLAG_NO_GPUS
    binding_version = "compute-domains LibraryNvml"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lib: ctypes.CDLL | None = None

    def _fn(self, name: str) -> Any:
        if self._lib is None:
            try:
                self._lib = ctypes.CDLL(str(self.path), mode=ctypes.RTLD_LOCAL)
            except OSError as err:
                raise LibraryNvmlError(
                    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, f"cannot load {self.path}: {err}"
                ) from err
        try:
            return getattr(self._lib, name)
        except AttributeError:
            raise LibraryNvmlError(
                pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, f"{name}: Function Not Found"
            ) from None

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        """The C entry point ``name`` (as nvidia-ml-py's function of that name)."""
        return self._fn(name)

    def nvmlErrorString(self, result: int) -> str:  # noqa: D102
        text = self._fn("nvmlErrorString")
        text.restype = ctypes.c_char_p
        return (text(ctypes.c_int(result)) or b"Unknown Error").decode(errors="replace")

    def _check(self, rc: int) -> None:
        if rc != pynvml.NVML_SUCCESS:
            raise LibraryNvmlError(rc, self.nvmlErrorString(rc))

    def nvmlInitWithFlags(self, flags: int) -> None:  # noqa: D102
        self._check(self._fn("nvmlInitWithFlags")(ctypes.c_uint(flags)))

    def nvmlShutdown(self) -> None:  # noqa: D102
        self._check(self._fn("nvmlShutdown")())

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: D102
        buf = ctypes.create_string_buffer(_VERSION_BUFFER)
        self._check(self._fn("nvmlSystemGetDriverVersion")(buf, ctypes.c_uint(_VERSION_BUFFER)))
        return buf.value.decode(errors="replace")

    def nvmlDeviceGetCount(self) -> int:  # noqa: D102
        count = ctypes.c_uint()
        self._check(self._fn("nvmlDeviceGetCount_v2")(ctypes.byref(count)))
        return count.value

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:  # noqa: D102
        handle = pynvml.c_nvmlDevice_t()
        self._check(
            self._fn("nvmlDeviceGetHandleByIndex_v2")(ctypes.c_uint(index), ctypes.byref(handle))
        )
        return handle

    def _text(self, name: str, handle: Any) -> str:
        buf = ctypes.create_string_buffer(_NAME_BUFFER)
        self._check(self._fn(name)(handle, buf, ctypes.c_uint(_NAME_BUFFER)))
        return buf.value.decode(errors="replace")

    def nvmlDeviceGetName(self, handle: Any) -> str:  # noqa: D102
        return self._text("nvmlDeviceGetName", handle)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:  # noqa: D102
        return self._text("nvmlDeviceGetUUID", handle)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:  # noqa: D102
        info = pynvml.nvmlPciInfo_t()
        self._check(self._fn("nvmlDeviceGetPciInfo_v3")(handle, ctypes.byref(info)))
        return info
