import ctypes
import dataclasses
import struct
from pathlib import Path
from typing import Any
from uuid import UUID

import pynvml
import pytest

from compute_domains.infra import errors
from compute_domains.plugin import discovery, nodeinfo

PROC_DEVICES = """Character devices:
  1 mem
195 nvidia
234 nvidia-caps-imex-channels
235 nvidia-caps
236 nvidia-caps-extra

Block devices:
  8 sd
242 nvidia-caps-imex-channels
"""
CLUSTER = UUID("8f0e6c1a-3b2d-4e5f-9a8b-7c6d5e4f3a2b")
_BYREF_TYPE = type(ctypes.byref(ctypes.c_int()))
# What the C library writes: nvml.h's nvmlGpuFabricInfo_t and nvmlGpuFabricInfo_v2_t, packed by
# hand so no ctypes declaration (ours or the binding's) decides where the bytes go.
_C_V1 = struct.Struct("<16sIIB3s")
_C_V2 = struct.Struct("<I16sIIB3sI")


class Binding13610FabricInfo(ctypes.Structure):
    """nvidia-ml-py 12.535 … 13.610.43's ``c_nvmlGpuFabricInfo_t`` (clusterUuid 80 bytes)."""

    _fields_ = (
        ("clusterUuid", ctypes.c_uint8 * 80),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    )


@dataclasses.dataclass
class FakeGpu:
    name: str = "NVIDIA GB200"
    uuid: str = "GPU-0"
    bus_id: bytes = b"00000000:01:00.0"
    fabric_error: int | None = None
    state: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    status: int = pynvml.NVML_SUCCESS
    cluster: UUID = CLUSTER
    clique: int = 7
    padding: bytes = bytes(3)
    """The three bytes after ``state`` (C padding: the library may leave anything there)."""


class FakeNvml:
    """A pynvml over a fake C library: entry points write C-layout bytes, as NVML does.

    Both ways in are offered, as nvidia-ml-py offers them: the C entry points through
    ``_nvmlGetFunctionPointer`` and the binding's wrappers with its declared structures.
    """

    NVMLError = pynvml.NVMLError
    NVML_SUCCESS = pynvml.NVML_SUCCESS
    NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_INIT_FLAG_NO_GPUS = pynvml.NVML_INIT_FLAG_NO_GPUS
    c_nvmlGpuFabricInfo_t: type[ctypes.Structure] = pynvml.c_nvmlGpuFabricInfo_t
    c_nvmlGpuFabricInfoV_t: type[ctypes.Structure] = pynvml.c_nvmlGpuFabricInfoV_t

    def __init__(self, gpus: list[FakeGpu], *, legacy_missing: bool = False) -> None:
        self.gpus = gpus
        self.legacy_missing = legacy_missing
        self.calls: list[str] = []

    def nvmlInitWithFlags(self, flags: int) -> None:
        assert flags == pynvml.NVML_INIT_FLAG_NO_GPUS
        self.calls.append("init")

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> bytes:
        return gpu.name.encode()

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> Any:
        return type("Pci", (), {"busId": gpu.bus_id})()

    def nvmlErrorString(self, result: int) -> str:
        return str(pynvml.NVMLError(result))

    # -- the fake C library --

    def _c_fabric(self, gpu: FakeGpu, ref: Any) -> int:
        assert isinstance(ref, _BYREF_TYPE), "fabric info must be passed by reference"
        if gpu.fabric_error is not None:
            return gpu.fabric_error
        data = _C_V1.pack(gpu.cluster.bytes, gpu.status, gpu.clique, gpu.state, gpu.padding)
        ctypes.memmove(ctypes.addressof(ref._obj), data, len(data))
        return pynvml.NVML_SUCCESS

    def _c_fabric_v(self, gpu: FakeGpu, ref: Any) -> int:
        assert isinstance(ref, _BYREF_TYPE), "fabric info must be passed by reference"
        version = ctypes.c_uint.from_address(ctypes.addressof(ref._obj)).value
        if version != pynvml.nvmlGpuFabricInfo_v2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if gpu.fabric_error is not None:
            return gpu.fabric_error
        data = _C_V2.pack(
            version, gpu.cluster.bytes, gpu.status, gpu.clique, gpu.state, gpu.padding, 0
        )
        ctypes.memmove(ctypes.addressof(ref._obj), data, len(data))
        return pynvml.NVML_SUCCESS

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        if name == "nvmlDeviceGetGpuFabricInfo" and not self.legacy_missing:
            return self._c_fabric
        if name == "nvmlDeviceGetGpuFabricInfoV":
            return self._c_fabric_v
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    # -- the binding's wrappers: hand the argument to C as it is, check the result --

    def nvmlDeviceGetGpuFabricInfo(self, gpu: FakeGpu, ref: Any) -> int:
        rc = self._nvmlGetFunctionPointer("nvmlDeviceGetGpuFabricInfo")(gpu, ref)
        if rc != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(rc)
        return rc

    def nvmlDeviceGetGpuFabricInfoV(self, gpu: FakeGpu, ref: Any) -> int:
        rc = self._nvmlGetFunctionPointer("nvmlDeviceGetGpuFabricInfoV")(gpu, ref)
        if rc != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(rc)
        return rc


class Nvml13610(FakeNvml):
    """The same library behind nvidia-ml-py 13.610.43's declarations."""

    c_nvmlGpuFabricInfo_t = Binding13610FabricInfo


def _discover(tmp_path: Path, nvml: FakeNvml, *, strict: bool = True, proc: str = PROC_DEVICES):
    (tmp_path / "devices").write_text(proc)
    found = discovery.NvmlDiscovery(
        proc_devices=tmp_path / "devices", strict_fabric=strict, nvml=nvml
    ).discover()
    assert nvml.calls[0] == "init" and nvml.calls[-1] == "shutdown"
    return found


def test_gb200_mnnvl_node_reports_its_clique(tmp_path: Path) -> None:
    gpus = [FakeGpu(uuid=f"GPU-{i}") for i in range(4)]
    found = _discover(tmp_path, FakeNvml([*gpus, FakeGpu(name="NVIDIA DGX Display")]))
    assert found.clique_id == f"{CLUSTER}.7"
    assert found.driver_version == "580.159.04"
    assert [g.uuid for g in found.gpus] == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]
    assert found.gpus[0].pci_bus_id == "00000000:01:00.0"
    assert found.gpus[0].fabric_state is nodeinfo.FabricState.COMPLETED
    assert (found.channel_major, found.caps_major) == (234, 235)


def test_versioned_fabric_call_is_used_when_the_legacy_one_is_gone(tmp_path: Path) -> None:
    found = _discover(tmp_path, FakeNvml([FakeGpu()], legacy_missing=True))
    assert found.clique_id == f"{CLUSTER}.7"


@pytest.mark.parametrize(
    "gpu",
    [
        FakeGpu(cluster=UUID(int=0), clique=0),
        FakeGpu(fabric_error=pynvml.NVML_ERROR_NOT_SUPPORTED),
        FakeGpu(state=pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED),
    ],
    ids=["zero-cluster-uuid (H200)", "nvml-not-supported", "state-not-supported"],
)
def test_gpus_without_mnnvl_give_no_clique(tmp_path: Path, gpu: FakeGpu) -> None:
    found = _discover(tmp_path, FakeNvml([gpu, dataclasses.replace(gpu, uuid="GPU-1")]))
    assert found.clique_id == ""
    assert [g.clique for g in found.gpus] == [None, None]


def test_no_gpus_is_no_error(tmp_path: Path) -> None:
    found = _discover(tmp_path, FakeNvml([]), proc="Character devices:\n\nBlock devices:\n")
    assert (found.gpus, found.clique_id, found.channel_major) == ((), "", None)


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        (FakeGpu(state=pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS), "IN_PROGRESS; refusing"),
        (FakeGpu(state=pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED), "NOT_STARTED; refusing"),
        (FakeGpu(status=pynvml.NVML_ERROR_UNKNOWN), "registration failed"),
        (FakeGpu(fabric_error=pynvml.NVML_ERROR_GPU_IS_LOST), "NVML query failed"),
    ],
    ids=["in-progress", "not-started", "bad-status", "other-nvml-error"],
)
def test_strict_mode_refuses_a_fabric_that_is_not_ready(
    tmp_path: Path, gpu: FakeGpu, message: str
) -> None:
    with pytest.raises(nodeinfo.DiscoveryError, match=message) as caught:
        _discover(tmp_path, FakeNvml([gpu]))
    assert isinstance(caught.value, errors.ConfigError)


@pytest.mark.parametrize(
    "gpu",
    [
        FakeGpu(state=pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS),
        FakeGpu(status=pynvml.NVML_ERROR_UNKNOWN),
    ],
    ids=["in-progress", "bad-status"],
)
def test_lenient_mode_falls_back_to_no_clique(tmp_path: Path, gpu: FakeGpu) -> None:
    found = _discover(tmp_path, FakeNvml([gpu, FakeGpu(uuid="GPU-1")]), strict=False)
    assert found.clique_id == f"{CLUSTER}.7"
    assert found.gpus[0].clique is None


@pytest.mark.parametrize(
    "other",
    [FakeGpu(uuid="GPU-1", clique=8), FakeGpu(uuid="GPU-1", cluster=UUID(int=5))],
    ids=["clique-differs", "cluster-differs"],
)
def test_mixed_cliques_are_an_error(tmp_path: Path, other: FakeGpu) -> None:
    with pytest.raises(nodeinfo.DiscoveryError, match="disagree"):
        _discover(tmp_path, FakeNvml([FakeGpu(), other]))


def test_clique_without_imex_majors_is_an_error(tmp_path: Path) -> None:
    proc = "Character devices:\n195 nvidia\n\nBlock devices:\n"
    with pytest.raises(nodeinfo.DiscoveryError, match="nvidia-caps-imex-channels"):
        _discover(tmp_path, FakeNvml([FakeGpu()]), proc=proc)


def test_nvml_init_failure_is_a_discovery_error() -> None:
    class NoDriver(FakeNvml):
        def nvmlInitWithFlags(self, flags: int) -> None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    with pytest.raises(nodeinfo.DiscoveryError, match="initialisation"):
        discovery.discover_gpus(NoDriver([]))


@pytest.mark.parametrize(
    ("text", "name", "major"),
    [
        (PROC_DEVICES, "nvidia-caps-imex-channels", 234),
        (PROC_DEVICES, "nvidia-caps", 235),
        (PROC_DEVICES, "nvidia", 195),
        (PROC_DEVICES, "sd", None),
        (PROC_DEVICES, "nvidia-uvm", None),
        ("Character devices:\n 10 misc\nBlock devices:\n", "misc", 10),
    ],
    ids=["imex-channels", "caps-not-prefix-of-longer", "nvidia", "block-only", "absent", "padded"],
)
def test_find_char_major(text: str, name: str, major: int | None) -> None:
    assert discovery.find_char_major(text, name) == major


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Character devices:\n1 a\n2 a\nBlock devices:\n", "listed 2 times"),
        ("Character devices:\n1 a\n", "section headers"),
        ("Block devices:\n1 a\nCharacter devices:\n1 a\n", "section headers"),
        ("Character devices:\n4294967296 a\nBlock devices:\n", "out-of-range"),
    ],
    ids=["duplicate", "no-block-section", "sections-swapped", "too-big"],
)
def test_find_char_major_rejects_bad_tables(text: str, message: str) -> None:
    with pytest.raises(nodeinfo.DiscoveryError, match=message):
        discovery.find_char_major(text, "a")


def test_parse_capability_file() -> None:
    text = "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
    assert discovery.parse_capability(text) == nodeinfo.CapabilityDevice(
        minor=1, file_mode=256, modify=1
    )
    with pytest.raises(nodeinfo.DiscoveryError):
        discovery.parse_capability("DeviceFileMinor: x\n")


def test_a_binding_with_the_80_byte_uuid_layout_still_finds_the_clique(tmp_path: Path) -> None:
    # nvidia-ml-py 13.610.43 puts status, cliqueId and state 64 bytes past where NVML writes
    # them; read through its structure, every GPU reads state 0 (NOT_SUPPORTED) and no clique.
    gpus = [FakeGpu(uuid=f"GPU-{i}") for i in range(4)]
    found = _discover(tmp_path, Nvml13610(gpus))
    assert found.clique_id == f"{CLUSTER}.7"
    assert {g.fabric_state for g in found.gpus} == {nodeinfo.FabricState.COMPLETED}
    assert found.binding is not None and found.binding.usable
    assert "clusterUuid 80 bytes, C 16" in found.binding.summary()


def test_the_padding_after_state_is_not_read_as_state(tmp_path: Path) -> None:
    # nvml.h's state is one byte; what the library leaves in the 3 bytes after it is not ours.
    found = _discover(tmp_path, FakeNvml([FakeGpu(padding=b"\xab\xcd\xef")]))
    assert found.clique_id == f"{CLUSTER}.7"


def test_an_unknown_fabric_state_is_a_discovery_error(tmp_path: Path) -> None:
    with pytest.raises(nodeinfo.DiscoveryError, match="unknown fabric state 9"):
        _discover(tmp_path, FakeNvml([FakeGpu(state=9)]), strict=False)


def test_a_binding_without_the_symbol_lookup_is_refused_before_nvml_starts() -> None:
    class NoLookup(FakeNvml):
        _nvmlGetFunctionPointer = None  # type: ignore[assignment]

    nvml = NoLookup([FakeGpu()])
    with pytest.raises(nodeinfo.DiscoveryError, match="no _nvmlGetFunctionPointer"):
        discovery.discover_gpus(nvml)
    assert nvml.calls == []


def test_a_missing_nvml_library_names_the_driver_root_and_its_chart_key() -> None:
    """Issue 27 point 2: NVIDIA's chart users who leave nvidiaDriverRoot at '/' under the GPU
    Operator see which key to set and where the plugin looked, not only NVML's words."""
    from compute_domains.plugin import nvmllib

    assert pynvml.NVML_ERROR_LIBRARY_NOT_FOUND == discovery.LIBRARY_NOT_FOUND
    for cause in (
        nvmllib.LibraryNvmlError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "cannot load x"),
        pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND),
    ):
        err = nodeinfo.DiscoveryError(f"NVML initialisation failed: {cause}")
        err.__cause__ = cause
        out = discovery.with_driver_root(err, driver_root=Path("/"), seen_at=Path("/driver-root"))
        text = str(out)
        assert text.startswith("NVML initialisation failed: ")
        assert "nvidiaDriverRoot" in text
        assert "driver root / " in text and "/driver-root" in text
        assert "/run/nvidia/driver" in text
        assert out.__cause__ is cause

    other = nodeinfo.DiscoveryError("NVML initialisation failed: Unknown Error")
    other.__cause__ = pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    assert discovery.with_driver_root(other, driver_root=Path("/"), seen_at=Path("/")) is other
