import ctypes
import importlib.metadata
import types
from pathlib import Path

import pynvml
import pytest

from compute_domains.plugin import fabricinfo


def _struct(name: str, fields: list[tuple[str, object]]) -> type[ctypes.Structure]:
    return type(name, (ctypes.Structure,), {"_fields_": fields})


_STATUS_ON = [("status", ctypes.c_uint), ("cliqueId", ctypes.c_uint32), ("state", ctypes.c_uint)]
# The declarations nvidia-ml-py releases made (checked against their pynvml.py).
V1_80_UINT8 = _struct("v1_13610", [("clusterUuid", ctypes.c_uint8 * 80), *_STATUS_ON])
V1_80_CHAR = _struct("v1_12535", [("clusterUuid", ctypes.c_char * 80), *_STATUS_ON])
V2_16_CHAR = _struct(
    "v2_12570",
    [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_char * 16),
        *_STATUS_ON,
        ("healthMask", ctypes.c_uint),
    ],
)


def test_the_structures_have_nvml_h_layout() -> None:
    assert ctypes.sizeof(fabricinfo.FabricInfoV1) == 28
    assert ctypes.sizeof(fabricinfo.FabricInfoV2) == 36
    assert fabricinfo.VERSION_2 == 0x02000024 == pynvml.nvmlGpuFabricInfo_v2
    v1, v2 = fabricinfo.FabricInfoV1, fabricinfo.FabricInfoV2
    assert [v1.status.offset, v1.cliqueId.offset, v1.state.offset] == [16, 20, 24]
    assert [v2.status.offset, v2.cliqueId.offset, v2.state.offset] == [20, 24, 28]
    assert v2.healthMask.offset == 32


def test_the_installed_binding_is_checked() -> None:
    check = fabricinfo.check_binding(pynvml)
    assert check.version == f"nvidia-ml-py {importlib.metadata.version('nvidia-ml-py')}"
    assert check.usable


def test_a_pynvml_the_distribution_did_not_install_is_named_by_its_file(tmp_path: Path) -> None:
    # A copy on PYTHONPATH shadows the installed one: the installed version would be a lie.
    copy = types.ModuleType("pynvml")
    copy.__file__ = str(tmp_path / "pynvml.py")
    assert fabricinfo.binding_version(copy) == f"pynvml from {tmp_path}/pynvml.py (version unknown)"


@pytest.mark.parametrize(
    ("v1", "v_versioned", "expected"),
    [
        (
            V1_80_UINT8,
            None,
            [
                "c_nvmlGpuFabricInfo_t: 92 bytes, C 28",
                "c_nvmlGpuFabricInfo_t: status at offset 80, C 16",
                "c_nvmlGpuFabricInfo_t: cliqueId at offset 84, C 20",
                "c_nvmlGpuFabricInfo_t: state at offset 88, C 24",
                "c_nvmlGpuFabricInfo_t: clusterUuid 80 bytes, C 16",
            ],
        ),
        (
            V1_80_CHAR,
            V2_16_CHAR,
            [
                "c_nvmlGpuFabricInfo_t: 92 bytes, C 28",
                "c_nvmlGpuFabricInfo_t: status at offset 80, C 16",
                "c_nvmlGpuFabricInfo_t: cliqueId at offset 84, C 20",
                "c_nvmlGpuFabricInfo_t: state at offset 88, C 24",
                "c_nvmlGpuFabricInfo_t: clusterUuid 80 bytes, C 16",
                "c_nvmlGpuFabricInfo_t: clusterUuid typed c_char (reads stop at its first zero "
                "byte)",
                "c_nvmlGpuFabricInfoV_t: clusterUuid typed c_char (reads stop at its first zero "
                "byte)",
            ],
        ),
        (fabricinfo.FabricInfoV1, fabricinfo.FabricInfoV2, []),
    ],
    ids=["13.610.43", "12.570", "c-layout"],
)
def test_differences_from_the_c_layout_are_named(
    v1: type[ctypes.Structure], v_versioned: type[ctypes.Structure] | None, expected: list[str]
) -> None:
    binding = types.SimpleNamespace(
        c_nvmlGpuFabricInfo_t=v1, c_nvmlGpuFabricInfoV_t=v_versioned, binding_version="fake 1"
    )
    binding._nvmlGetFunctionPointer = lambda name: None
    check = fabricinfo.check_binding(binding)
    assert (check.version, check.usable, list(check.differences)) == ("fake 1", True, expected)
    if expected:
        assert "not used, fabric info read with the C layout" in check.summary()
    else:
        assert "match nvml.h" in check.summary()


def test_a_binding_without_the_lookup_is_not_usable() -> None:
    check = fabricinfo.check_binding(types.SimpleNamespace(binding_version="fake 2"))
    assert not check.usable
    assert "refusing to start" in check.summary()
    with pytest.raises(fabricinfo.BindingError, match="fake 2: no _nvmlGetFunctionPointer"):
        fabricinfo.require_usable(types.SimpleNamespace(binding_version="fake 2"))
