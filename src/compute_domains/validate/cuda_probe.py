"""The small CUDA program each ``imex-channels`` workload container runs (fabric memory probe).

Run as ``python -m compute_domains.validate.cuda_probe ROLE --exchange DIR [--pci-bus-id ID]``:
- ``alloc``: ``cuMemCreate`` with ``CU_MEM_HANDLE_TYPE_FABRIC`` and nothing else;
- ``export``: allocate, write a seeded pattern, export the 64-byte fabric handle to
  ``DIR/export.json`` (or ``DIR/export-failed.json``), then keep the memory alive until
  ``DIR/release`` appears or the timeout passes;
- ``import``: wait for the export, ``cuMemImportFromShareableHandle(FABRIC)``, map it on this
  container's GPU, copy it back and compare it with the pattern.
It prints exactly one ``RESULT_MARKER`` line with a JSON ``ProbeResult`` and exits 0; a crash
exits non-zero. The GPU is chosen by PCI bus ID (a container sees only its own GPU, as ordinal 0).
The CUDA driver API comes from cuda-python (``cuda.bindings.driver``, or the older ``cuda.cuda``),
imported lazily so this module imports without it. This module uses only the standard library
otherwise, so the exchange helpers also serve the orchestrator and test stand-ins.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

RESULT_MARKER = "CD-PROBE-RESULT "
"""Prefix of the one result line a probe prints."""
EXPORT_FILE = "export.json"
"""Written by the exporter: ``{"handle": hex, "size": n, "seed": s}``."""
FAILED_FILE = "export-failed.json"
"""Written by the exporter instead when it could not export."""
RELEASE_FILE = "release"
"""Created by the orchestrator when the importers are done."""
CHANNEL_DIR = Path("/dev/nvidia-caps-imex-channels")
"""Where a container's IMEX channel nodes are."""
_SIZE = 2 << 20
_POLL_S = 0.05


@dataclasses.dataclass(kw_only=True, slots=True)
class ProbeResult:
    """What one probe did; ``step`` is the last CUDA call tried, ``error`` its error name."""

    role: str
    ok: bool = False
    step: str = ""
    error: str = ""
    detail: str = ""
    channels: list[str] = dataclasses.field(default_factory=list)
    device: str = ""
    """PCI bus ID of the GPU used, as CUDA reports it."""
    fabric_supported: bool | None = None
    bytes: int = 0
    matched: bool | None = None
    """Import only: whether the data read equals the exporter's pattern."""

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ProbeResult:
        """Rebuild a result from its JSON form (unknown keys ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


class CudaCallError(Exception):
    """A CUDA driver call returned an error; ``name`` is its ``CUDA_ERROR_*`` name."""

    def __init__(self, step: str, name: str) -> None:
        super().__init__(f"{step}: {name}")
        self.step = step
        self.name = name


def pattern(seed: int, size: int) -> bytes:
    """The deterministic bytes the exporter writes and importers expect."""
    return random.Random(seed).randbytes(size)


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` atomically (temp file, then rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def wait_export(exchange: Path, timeout_s: float) -> dict[str, Any] | None:
    """The export document (``failed`` set when export failed); None on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name, failed in ((EXPORT_FILE, False), (FAILED_FILE, True)):
            path = exchange / name
            if path.exists():
                doc: dict[str, Any] = json.loads(path.read_text())
                doc["failed"] = failed
                return doc
        time.sleep(_POLL_S)
    return None


def visible_channels(folder: Path = CHANNEL_DIR) -> list[str]:
    """The channel nodes this process can see."""
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def emit(result: ProbeResult) -> None:
    """Print the result line (flushed: the log file is read right after exit)."""
    print(RESULT_MARKER + json.dumps(dataclasses.asdict(result)), flush=True)


def parse_result(log_text: str) -> ProbeResult | None:
    """The last result line in a container log; None when the probe printed none."""
    for line in reversed(log_text.splitlines()):
        if line.startswith(RESULT_MARKER):
            return ProbeResult.from_json(json.loads(line[len(RESULT_MARKER) :]))
    return None


class _Cuda:
    """Thin checked wrapper over cuda-python's driver module."""

    def __init__(self, pci_bus_id: str) -> None:
        self.drv = _driver_module()
        self.call("cuInit", 0)
        self.dev: Any = None
        if pci_bus_id:
            try:
                self.dev = self.call("cuDeviceGetByPCIBusId", pci_bus_id.encode())
            except CudaCallError:
                self.dev = None  # not visible under that ID: use the container's first GPU
        if self.dev is None:
            self.dev = self.call("cuDeviceGet", 0)
        self.ordinal = int(self.dev)
        ctx = self.call("cuDevicePrimaryCtxRetain", self.dev)
        self.call("cuCtxSetCurrent", ctx)
        raw = self.call("cuDeviceGetPCIBusId", 32, self.dev)
        self.bus_id = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
        attr = self.drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED
        self.fabric_supported = bool(self.call("cuDeviceGetAttribute", attr, self.dev))
        self.fabric = self.drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_FABRIC

    def call(self, name: str, *args: Any) -> Any:
        """Call ``drv.<name>``; raise ``CudaCallError`` unless it returned success."""
        out = getattr(self.drv, name)(*args)
        out = out if isinstance(out, tuple) else (out,)
        if out[0] != self.drv.CUresult.CUDA_SUCCESS:
            raise CudaCallError(name, self._error_name(out[0]))
        rest = out[1:]
        return rest[0] if len(rest) == 1 else rest

    def _error_name(self, err: Any) -> str:
        name = getattr(err, "name", "")
        if isinstance(name, str) and name.startswith("CUDA_"):
            return name
        _, raw = self.drv.cuGetErrorName(err)
        return raw.decode() if isinstance(raw, bytes) else str(err)

    def _location(self) -> Any:
        loc = self.drv.CUmemLocation()
        loc.type = self.drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        loc.id = self.ordinal
        return loc

    def create(self) -> tuple[Any, int]:
        """A fabric-exportable allocation of at least ``_SIZE`` bytes: (handle, size)."""
        prop = self.drv.CUmemAllocationProp()
        prop.type = self.drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location = self._location()
        prop.requestedHandleTypes = self.fabric
        flag = self.drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM
        gran = int(self.call("cuMemGetAllocationGranularity", prop, flag))
        size = -(-_SIZE // gran) * gran
        return self.call("cuMemCreate", size, prop, 0), size

    def map(self, handle: Any, size: int) -> int:
        """Reserve an address range, map ``handle`` there read-write for this GPU."""
        ptr = self.call("cuMemAddressReserve", size, 0, 0, 0)
        self.call("cuMemMap", ptr, size, 0, handle, 0)
        desc = self.drv.CUmemAccessDesc()
        desc.location = self._location()
        desc.flags = self.drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        self.call("cuMemSetAccess", ptr, size, [desc], 1)
        return int(ptr)

    def export(self, handle: Any) -> bytes:
        """The allocation's 64-byte fabric handle."""
        fh = self.call("cuMemExportToShareableHandle", handle, self.fabric, 0)
        return bytes(fh.data)

    def import_(self, raw: bytes) -> Any:
        """Import a fabric handle (bytes, as a buffer; the handle struct on older bindings)."""
        try:
            return self.call("cuMemImportFromShareableHandle", raw, self.fabric)
        except TypeError:
            fh = self.drv.CUmemFabricHandle()
            fh.data = raw
            return self.call("cuMemImportFromShareableHandle", fh, self.fabric)

    def write(self, ptr: int, data: bytes) -> None:
        """Copy ``data`` to device address ``ptr``."""
        buf = ctypes.create_string_buffer(data, len(data))
        self.call("cuMemcpyHtoD", ptr, ctypes.addressof(buf), len(data))

    def read(self, ptr: int, size: int) -> bytes:
        """Copy ``size`` bytes from device address ``ptr``."""
        buf = ctypes.create_string_buffer(size)
        self.call("cuMemcpyDtoH", ctypes.addressof(buf), ptr, size)
        return buf.raw


def _driver_module() -> Any:
    try:
        from cuda.bindings import driver  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        from cuda import cuda as driver  # type: ignore[import-not-found,no-redef,unused-ignore]
    return driver


def run(role: str, exchange: Path, pci_bus_id: str, timeout_s: float) -> ProbeResult:
    """Do ``role``; every CUDA failure ends up in the result, never as an exception."""
    res = ProbeResult(role=role, channels=visible_channels())
    try:
        cuda = _Cuda(pci_bus_id)
        res.device, res.fabric_supported = cuda.bus_id, cuda.fabric_supported
        if role == "import":
            _import(cuda, res, exchange, timeout_s)
        else:
            res.step = "cuMemCreate"
            handle, size = cuda.create()
            res.bytes = size
            if role == "export":
                _export(cuda, res, handle, size, exchange, timeout_s)
        res.ok = True
    except CudaCallError as err:
        res.step, res.error = err.step, err.name
    except Exception as err:  # an API mismatch must still end in a result line
        res.error, res.detail = "PROBE_ERROR", f"{type(err).__name__}: {err}"
    if role == "export" and not res.ok:
        write_json(exchange / FAILED_FILE, {"step": res.step, "error": res.error})
    return res


def _export(
    cuda: _Cuda, res: ProbeResult, handle: Any, size: int, exchange: Path, t: float
) -> None:
    seed = int.from_bytes(os.urandom(4), "little")
    ptr = cuda.map(handle, size)
    cuda.write(ptr, pattern(seed, size))
    res.step = "cuMemExportToShareableHandle"
    raw = cuda.export(handle)
    write_json(exchange / EXPORT_FILE, {"handle": raw.hex(), "size": size, "seed": seed})
    res.detail = f"exported {size} bytes as a {len(raw)}-byte fabric handle"
    deadline = time.monotonic() + t
    while not (exchange / RELEASE_FILE).exists() and time.monotonic() < deadline:
        time.sleep(_POLL_S)


def _import(cuda: _Cuda, res: ProbeResult, exchange: Path, timeout_s: float) -> None:
    doc = wait_export(exchange, timeout_s)
    if doc is None or doc["failed"]:
        res.step, res.error = "wait-for-export", "NO_EXPORT"
        res.detail = "the exporter did not export a handle" if doc else "timed out"
        raise CudaCallError(res.step, res.error)
    res.step = "cuMemImportFromShareableHandle"
    handle = cuda.import_(bytes.fromhex(doc["handle"]))
    size = int(doc["size"])
    res.step = "cuMemMap"
    ptr = cuda.map(handle, size)
    res.step = "cuMemcpyDtoH"
    res.bytes = size
    res.matched = cuda.read(ptr, size) == pattern(int(doc["seed"]), size)
    res.detail = f"read {size} bytes through the imported handle"


def main(argv: list[str]) -> int:
    """Parse arguments, run the role, print the result line; 0 unless crashed."""
    parser = argparse.ArgumentParser(prog="cuda_probe")
    parser.add_argument("role", choices=["alloc", "export", "import"])
    parser.add_argument("--exchange", type=Path, required=True)
    parser.add_argument("--pci-bus-id", default="")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    emit(run(args.role, args.exchange, args.pci_bus_id, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
