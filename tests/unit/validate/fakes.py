"""Stand-ins for the validate unit tests: an NVML that answers like an H200 node."""

from __future__ import annotations

import ctypes
import dataclasses
import struct
import uuid
from typing import Any

import pynvml

ZERO = uuid.UUID(int=0)


@dataclasses.dataclass
class Gpu:
    name: str = "NVIDIA H200"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: bytes = b"00000000:18:00.0"
    state: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    cluster: uuid.UUID = ZERO
    clique: int = 0


class Nvml:
    """The pynvml members discovery and ``host.require_gpus`` use."""

    NVMLError = pynvml.NVMLError
    NVML_SUCCESS = pynvml.NVML_SUCCESS
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_INIT_FLAG_NO_GPUS = pynvml.NVML_INIT_FLAG_NO_GPUS
    binding_version = "fake-nvml 1.0"
    c_nvmlGpuFabricInfo_t: type[ctypes.Structure] = pynvml.c_nvmlGpuFabricInfo_t
    c_nvmlGpuFabricInfoV_t: type[ctypes.Structure] = pynvml.c_nvmlGpuFabricInfoV_t

    def __init__(self, gpus: list[Gpu], *, init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.sessions = 0

    def nvmlInitWithFlags(self, flags: int) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.sessions += 1

    def nvmlShutdown(self) -> None:
        self.sessions -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Gpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: Gpu) -> str:
        return gpu.name

    def nvmlDeviceGetUUID(self, gpu: Gpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetPciInfo(self, gpu: Gpu) -> Any:
        return type("Pci", (), {"busId": gpu.bus_id})()

    def nvmlErrorString(self, result: int) -> str:
        return str(pynvml.NVMLError(result))

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        if name != "nvmlDeviceGetGpuFabricInfo":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return self._c_fabric

    def _c_fabric(self, gpu: Gpu, ref: Any) -> int:
        """What the C library writes: nvml.h's ``nvmlGpuFabricInfo_t``, packed by hand."""
        data = struct.pack(
            "<16sIIB3x", gpu.cluster.bytes, pynvml.NVML_SUCCESS, gpu.clique, gpu.state
        )
        ctypes.memmove(ctypes.addressof(ref._obj), data, len(data))
        return pynvml.NVML_SUCCESS


def h200_pair() -> list[Gpu]:
    return [
        Gpu(uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000", bus_id=b"00000000:18:00.0"),
        Gpu(uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000", bus_id=b"00000000:2A:00.0"),
    ]


PROC_DEVICES = """Character devices:
  1 mem
195 nvidia-frontend
234 nvidia-caps
242 nvidia-caps-imex-channels
508 nvidia-uvm

Block devices:
  8 sd
"""
