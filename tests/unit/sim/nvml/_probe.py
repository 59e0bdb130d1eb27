"""Run in a fresh interpreter: drive nvidia-ml-py against whatever libnvidia-ml.so.1 it loads.

Usage: python _probe.py SCENARIO [ARG]. Prints one JSON object on stdout. A fresh process per
run is needed because nvidia-ml-py keeps the library it loaded for the life of the process.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pynvml


def attempt(fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """Call ``fn``; report its value or the NVMLError class and code it raised."""
    try:
        return {"ok": fn(*args)}
    except pynvml.NVMLError as err:
        return {"error": type(err).__name__, "code": err.value}


def loaded_nvml() -> list[str]:
    """Paths of every libnvidia-ml mapped into this process."""
    with open("/proc/self/maps") as maps:
        return sorted({ln.split()[-1] for ln in maps if "libnvidia-ml" in ln})


def text(value: str | bytes) -> str:
    """nvidia-ml-py returns char arrays as str in some versions and bytes in others."""
    return value.decode() if isinstance(value, bytes) else value


def fabric_v1(handle: Any) -> dict[str, Any]:
    info = pynvml.c_nvmlGpuFabricInfo_t()
    ctypes.memset(ctypes.byref(info), 0xFF, ctypes.sizeof(info))  # the library must write it all
    res = attempt(pynvml.nvmlDeviceGetGpuFabricInfo, handle, ctypes.byref(info))
    if "error" in res:
        return res
    return {
        "cluster_uuid": str(uuid.UUID(bytes=bytes(info.clusterUuid))),
        "clique_id": info.cliqueId,
        "state": info.state,
        "status": info.status,
    }


def fabric_v(handle: Any, struct: type[Any]) -> dict[str, Any]:
    info = struct()
    version = info.version
    ctypes.memset(ctypes.byref(info), 0xFF, ctypes.sizeof(info))
    info.version = version
    res = attempt(pynvml.nvmlDeviceGetGpuFabricInfoV, handle, ctypes.byref(info))
    if "error" in res:
        return res
    out = {
        "version": info.version,
        "cluster_uuid": str(uuid.UUID(bytes=bytes(info.clusterUuid))),
        "clique_id": info.cliqueId,
        "state": info.state,
        "status": info.status,
        "health_mask": info.healthMask,
    }
    if hasattr(info, "healthSummary"):
        out["health_summary"] = info.healthSummary
    return out


def device(index: int) -> dict[str, Any]:
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    pci = pynvml.nvmlDeviceGetPciInfo_v3(h)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    mem2 = pynvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2)
    dev_uuid = pynvml.nvmlDeviceGetUUID(h)
    by_uuid = pynvml.nvmlDeviceGetHandleByUUID(dev_uuid)
    by_pci = pynvml.nvmlDeviceGetHandleByPciBusId(text(pci.busId))
    return {
        "uuid": dev_uuid,
        "name": pynvml.nvmlDeviceGetName(h),
        "index": pynvml.nvmlDeviceGetIndex(h),
        "minor": pynvml.nvmlDeviceGetMinorNumber(h),
        "bus_id": text(pci.busId),
        "bus_id_legacy": text(pci.busIdLegacy),
        "pci": [pci.domain, pci.bus, pci.device, pci.pciDeviceId, pci.pciSubSystemId],
        "memory": [mem.total, mem.free, mem.used],
        "memory_v2": [mem2.total, mem2.reserved, mem2.free, mem2.used],
        "architecture": pynvml.nvmlDeviceGetArchitecture(h),
        "compute_capability": list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
        "by_uuid_index": pynvml.nvmlDeviceGetIndex(by_uuid),
        "by_pci_index": pynvml.nvmlDeviceGetIndex(by_pci),
        "fabric": fabric_v1(h),
        "fabric_v2": fabric_v(h, pynvml.c_nvmlGpuFabricInfo_v2_t),
        "fabric_v3": fabric_v(h, pynvml.c_nvmlGpuFabricInfo_v3_t),
    }


def inventory() -> dict[str, Any]:
    pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_GPUS)
    out = {
        "driver_version": pynvml.nvmlSystemGetDriverVersion(),
        "nvml_version": pynvml.nvmlSystemGetNVMLVersion(),
        "cuda": pynvml.nvmlSystemGetCudaDriverVersion(),
        "cuda_v2": pynvml.nvmlSystemGetCudaDriverVersion_v2(),
        "gpus": [device(i) for i in range(pynvml.nvmlDeviceGetCount())],
        "loaded": loaded_nvml(),
    }
    pynvml.nvmlShutdown()
    return out


def init(flags: int) -> dict[str, Any]:
    res = attempt(pynvml.nvmlInitWithFlags, flags)
    if "error" not in res:
        res["count"] = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    res["loaded"] = loaded_nvml()
    return res


def misuse() -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_GPUS)
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as err:
        return {"setup_failed": str(err)}
    out["count_before_init"] = attempt(pynvml.nvmlDeviceGetCount)
    out["driver_before_init"] = attempt(pynvml.nvmlSystemGetDriverVersion)
    pynvml.nvmlInit()
    pynvml.nvmlInitWithFlags(0)  # nested: reference counted
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    out["bad_index"] = attempt(pynvml.nvmlDeviceGetHandleByIndex, 99)
    out["unknown_uuid"] = attempt(pynvml.nvmlDeviceGetHandleByUUID, "GPU-nope")
    out["unknown_pci"] = attempt(pynvml.nvmlDeviceGetHandleByPciBusId, "00000000:77:00.0")
    out["bad_pci"] = attempt(pynvml.nvmlDeviceGetHandleByPciBusId, "not-a-bus-id")
    bogus = pynvml.c_nvmlDevice_t()
    out["null_handle"] = attempt(pynvml.nvmlDeviceGetUUID, bogus)
    bad_v = pynvml.c_nvmlGpuFabricInfo_v2_t()
    bad_v.version = 0x01000020
    out["bad_version"] = attempt(pynvml.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(bad_v))
    out["bad_memory_version"] = attempt(pynvml.nvmlDeviceGetMemoryInfo, h, 0x01000018)
    # A version-2 caller's buffer ends before healthSummary: the library must not write there.
    v3 = pynvml.c_nvmlGpuFabricInfo_v3_t()
    ctypes.memset(ctypes.byref(v3), 0xFF, ctypes.sizeof(v3))
    v3.version = pynvml.nvmlGpuFabricInfo_v2
    pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(v3))
    out["v2_leaves_summary"] = [v3.state, v3.healthSummary]
    raw = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetUUID")
    out["small_buffer"] = raw(h, ctypes.create_string_buffer(8), ctypes.c_uint(8))
    out["error_string"] = pynvml.nvmlErrorString(pynvml.NVML_ERROR_NOT_SUPPORTED)
    out["missing_symbol"] = attempt(pynvml.nvmlDeviceGetSerial, h)
    pynvml.nvmlShutdown()
    out["count_after_one_shutdown"] = attempt(pynvml.nvmlDeviceGetCount)
    pynvml.nvmlShutdown()
    out["count_after_shutdown"] = attempt(pynvml.nvmlDeviceGetCount)
    out["extra_shutdown"] = attempt(pynvml.nvmlShutdown)
    return out


def threads() -> dict[str, Any]:
    """Many threads opening sessions and querying at once (NVML is thread-safe)."""
    failures: list[str] = []
    want = {}
    pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_GPUS)
    for i in range(pynvml.nvmlDeviceGetCount()):
        want[i] = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
    pynvml.nvmlShutdown()

    def work() -> None:
        for _ in range(300):
            try:
                pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_GPUS)
                for i, expected in want.items():
                    h = pynvml.nvmlDeviceGetHandleByIndex(i)
                    if pynvml.nvmlDeviceGetUUID(h) != expected or "error" in fabric_v1(h):
                        failures.append(f"gpu {i}: wrong answer")
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as err:
                failures.append(str(err))

    pool = [threading.Thread(target=work) for _ in range(8)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return {"failures": failures[:5], "after": attempt(pynvml.nvmlDeviceGetCount)}


def reload(second_config: str) -> dict[str, Any]:
    """Two sessions; the config file is replaced between them."""
    sessions = []
    for _ in range(2):
        pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_GPUS)
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        sessions.append(fabric_v1(h))
        pynvml.nvmlShutdown()
        shutil.copyfile(second_config, os.environ["MOCK_NVML_CONFIG"])
    return {"sessions": sessions}


def main() -> None:
    scenario = sys.argv[1]
    if scenario == "inventory":
        out = inventory()
    elif scenario == "init":
        out = init(int(sys.argv[2]))
    elif scenario == "misuse":
        out = misuse()
    elif scenario == "threads":
        out = threads()
    elif scenario == "reload":
        out = reload(sys.argv[2])
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
