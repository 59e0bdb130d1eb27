"""The built mock libnvidia-ml.so.1, driven through nvidia-ml-py in a fresh process per case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compute_domains.sim.nvml import config, profiles
from tests.unit.sim.nvml.support import Probe

NO_GPUS = "1"


def _write(tmp_path: Path, cfg: config.NodeNvmlConfig, name: str = "node.cfg") -> Path:
    path = tmp_path / name
    config.write(path, cfg)
    return path


def _expected_gpu(cfg: config.NodeNvmlConfig, index: int) -> dict[str, Any]:
    gpu = cfg.gpus[index]
    fabric = cfg.fabric_for(gpu)
    return {
        "uuid": gpu.uuid,
        "name": gpu.name,
        "index": index,
        "minor": index if gpu.minor is None else gpu.minor,
        "architecture": int(gpu.architecture),
        "compute_capability": list(gpu.compute_capability),
        "memory": [gpu.memory_total_bytes, gpu.memory_total_bytes - gpu.memory_used_bytes, 0],
        "by_uuid_index": index,
        "by_pci_index": index,
        "fabric_expect": fabric,
    }


CASES = [
    pytest.param(profiles.gb200(0, 0), id="gb200"),
    pytest.param(profiles.gb200(3, 7, gpus=2, clique_id=0xFFFFFFFF), id="gb200-max-clique"),
    pytest.param(profiles.h200(0, 1), id="h200"),
    pytest.param(profiles.fabric_in_progress(1, 0), id="fabric-in-progress"),
    pytest.param(profiles.fabric_error(1, 1), id="fabric-error"),
]


@pytest.mark.parametrize("cfg", CASES)
def test_inventory_matches_config(
    tmp_path: Path, lib_dir: Path, probe: Probe, cfg: config.NodeNvmlConfig
) -> None:
    res = probe(_write(tmp_path, cfg), "inventory")
    assert res.returncode == 0, res.stderr
    out = res.data
    # nvidia-ml-py loaded our library, from the test's folder, and no other one.
    assert out["loaded"] == [str(lib_dir / config.LIBRARY_NAME)]
    assert res.stderr == ""
    assert out["driver_version"] == cfg.driver_version
    assert out["nvml_version"] == f"13.{cfg.driver_version}"
    assert out["cuda"] == out["cuda_v2"] == 13000
    assert [g["uuid"] for g in out["gpus"]] == [g.uuid for g in cfg.gpus]
    for index, got in enumerate(out["gpus"]):
        want = _expected_gpu(cfg, index)
        fabric: config.FabricInfo = want.pop("fabric_expect")
        assert {k: got[k] for k in want} == want
        gpu = cfg.gpus[index]
        assert got["bus_id"] == gpu.pci_bus_id
        domain, bus, dev = (int(p, 16) for p in gpu.pci_bus_id.replace(".", ":").split(":")[:3])
        assert got["pci"] == [domain, bus, dev, gpu.pci_device_id, gpu.pci_subsystem_id]
        assert got["bus_id_legacy"] == f"{domain & 0xFFFF:04X}:{bus:02X}:{dev:02X}.0"
        assert got["memory_v2"] == [gpu.memory_total_bytes, 0, gpu.memory_total_bytes, 0]
        base = {
            "cluster_uuid": fabric.cluster_uuid,
            "clique_id": fabric.clique_id,
            "state": int(fabric.state),
            "status": int(fabric.status),
        }
        assert got["fabric"] == base
        assert got["fabric_v2"] == {
            **base,
            "version": 0x02000024,
            "health_mask": fabric.health_mask,
        }
        assert got["fabric_v3"] == {
            **base,
            "version": 0x03000028,
            "health_mask": fabric.health_mask,
            "health_summary": int(fabric.health_summary),
        }


def test_profiles_answer_fabric_as_the_plugin_expects(tmp_path: Path, probe: Probe) -> None:
    answers = {}
    for name, cfg in [
        ("gb200", profiles.gb200(5, 2, clique_id=42)),
        ("h200", profiles.h200(0, 0, gpus=2)),
        ("in-progress", profiles.fabric_in_progress(0, 0)),
        ("error", profiles.fabric_error(0, 0, status=config.NvmlReturn.INSUFFICIENT_RESOURCES)),
    ]:
        res = probe(_write(tmp_path, cfg, f"{name}.cfg"), "inventory")
        assert res.returncode == 0, res.stderr
        answers[name] = res.data["gpus"][0]["fabric"]
    assert answers["gb200"] == {
        "cluster_uuid": profiles.cluster_uuid(5),
        "clique_id": 42,
        "state": 3,
        "status": 0,
    }
    assert answers["h200"] == {
        "cluster_uuid": config.ZERO_CLUSTER_UUID,
        "clique_id": 0,
        "state": 3,
        "status": 0,
    }
    assert answers["in-progress"]["state"] == 2
    assert answers["error"]["state"] == 3
    assert answers["error"]["status"] == 23


def test_no_fabric_gpus_raise_not_supported(tmp_path: Path, probe: Probe) -> None:
    res = probe(_write(tmp_path, profiles.no_fabric(0, 0, gpus=2)), "inventory")
    assert res.returncode == 0, res.stderr
    not_supported = {"error": "NVMLError_NotSupported", "code": 3}
    for gpu in res.data["gpus"]:
        assert gpu["fabric"] == gpu["fabric_v2"] == gpu["fabric_v3"] == not_supported
        assert gpu["architecture"] == int(config.Architecture.AMPERE)


def test_per_gpu_fabric_override(tmp_path: Path, probe: Probe) -> None:
    node = profiles.gb200(0, 0, gpus=2)
    odd = config.FabricInfo(
        cluster_uuid=profiles.cluster_uuid(9), clique_id=9, state=config.FabricState.COMPLETED
    )
    cfg = config.NodeNvmlConfig(
        driver_version=node.driver_version,
        cuda_version=node.cuda_version,
        gpus=(node.gpus[0], config.GpuSpec(**{**_fields(node.gpus[1]), "fabric": odd})),
        cluster_uuid=node.cluster_uuid,
        clique_id=node.clique_id,
        fabric_state=node.fabric_state,
    )
    res = probe(_write(tmp_path, cfg), "inventory")
    assert res.returncode == 0, res.stderr
    cliques = [(g["fabric"]["cluster_uuid"], g["fabric"]["clique_id"]) for g in res.data["gpus"]]
    assert cliques == [(node.cluster_uuid, node.clique_id), (profiles.cluster_uuid(9), 9)]


def _fields(gpu: config.GpuSpec) -> dict[str, Any]:
    return {name: getattr(gpu, name) for name in gpu.__dataclass_fields__}


def test_misuse_gets_nvml_error_codes(tmp_path: Path, probe: Probe) -> None:
    res = probe(_write(tmp_path, profiles.gb200(0, 0)), "misuse")
    assert res.returncode == 0, res.stderr
    out = res.data
    uninit = {"error": "NVMLError_Uninitialized", "code": 1}
    invalid = {"error": "NVMLError_InvalidArgument", "code": 2}
    not_found = {"error": "NVMLError_NotFound", "code": 6}
    assert out["count_before_init"] == uninit
    assert out["driver_before_init"] == uninit
    assert out["bad_index"] == invalid
    assert out["null_handle"] == invalid
    assert out["bad_pci"] == invalid
    assert out["unknown_uuid"] == not_found
    assert out["unknown_pci"] == not_found
    assert out["bad_version"] == {"error": "NVMLError_ArgumentVersionMismatch", "code": 25}
    assert out["bad_memory_version"] == {"error": "NVMLError_ArgumentVersionMismatch", "code": 25}
    assert out["v2_leaves_summary"] == [3, 0xFF]
    assert out["small_buffer"] == 7  # NVML_ERROR_INSUFFICIENT_SIZE
    assert out["error_string"] == "Not Supported"
    assert out["missing_symbol"] == {"error": "NVMLError_FunctionNotFound", "code": 13}
    assert out["count_after_one_shutdown"] == {"ok": 4}  # init is reference counted
    assert out["count_after_shutdown"] == uninit
    assert out["extra_shutdown"] == uninit


def test_concurrent_sessions(tmp_path: Path, probe: Probe) -> None:
    res = probe(_write(tmp_path, profiles.gb200(0, 0)), "threads")
    assert res.returncode == 0, res.stderr
    assert res.data["failures"] == []
    assert res.data["after"] == {"error": "NVMLError_Uninitialized", "code": 1}


def test_config_is_reread_at_the_next_init(tmp_path: Path, probe: Probe) -> None:
    first = _write(tmp_path, profiles.fabric_in_progress(2, 0), "node.cfg")
    second = _write(tmp_path, profiles.gb200(2, 0), "later.cfg")
    res = probe(first, "reload", str(second))
    assert res.returncode == 0, res.stderr
    before, after = res.data["sessions"]
    assert (before["state"], before["cluster_uuid"]) == (2, config.ZERO_CLUSTER_UUID)
    assert (after["state"], after["cluster_uuid"]) == (3, profiles.cluster_uuid(2))


def test_zero_gpus_needs_the_no_gpus_flag(tmp_path: Path, probe: Probe) -> None:
    cfg = _write(
        tmp_path, config.NodeNvmlConfig(driver_version="580.1", cuda_version="13.0", gpus=())
    )
    with_flag = probe(cfg, "init", NO_GPUS)
    assert with_flag.data["ok"] is None and with_flag.data["count"] == 0
    without = probe(cfg, "init", "0")
    assert without.data["error"] == "NVMLError_DriverNotLoaded"


def test_init_return_simulates_a_broken_driver(tmp_path: Path, probe: Probe) -> None:
    broken = config.NodeNvmlConfig(
        driver_version="580.1",
        cuda_version="13.0",
        gpus=profiles.gb200(0, 0).gpus,
        init_return=config.NvmlReturn.NO_PERMISSION,
    )
    res = probe(_write(tmp_path, broken), "init", NO_GPUS)
    assert res.data["error"] == "NVMLError_NoPermission"


def test_missing_config_variable(lib_dir: Path, probe: Probe) -> None:
    res = probe(None, "init", NO_GPUS)
    assert res.data["error"] == "NVMLError_LibraryNotFound"
    assert res.data["loaded"] == [str(lib_dir / config.LIBRARY_NAME)]
    assert "mocknvml: MOCK_NVML_CONFIG is not set" in res.stderr


def test_missing_config_file(tmp_path: Path, probe: Probe) -> None:
    res = probe(tmp_path / "absent.cfg", "init", NO_GPUS)
    assert res.data["error"] == "NVMLError_LibraryNotFound"
    assert f"mocknvml: {tmp_path / 'absent.cfg'}: cannot open" in res.stderr


HEAD = "format=1\ndriver_version=580.1\ncuda_driver_version=13000\n"
GPU = "[gpu]\nuuid=GPU-a\nname=NVIDIA GB200\npci_bus_id=00000008:01:00.0\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(HEAD + GPU + "bogus=1\n", ":8: unknown [gpu] key: bogus", id="unknown-key"),
        pytest.param(HEAD + "colour=red\n", ":4: unknown global key: colour", id="unknown-global"),
        pytest.param(HEAD + GPU + "name=x\n", ":8: repeated key: name", id="repeated"),
        pytest.param(HEAD + GPU + "minor=-1\n", ":8: expected an unsigned", id="negative"),
        pytest.param(HEAD + GPU + "minor=0x1FFFFFFFF\n", "out of range", id="too-big"),
        pytest.param(HEAD + GPU + "fabric_state=256\n", "out of range", id="state-u8"),
        pytest.param(HEAD + GPU + "compute_capability=9\n", "<major>.<minor>", id="cc"),
        pytest.param(HEAD + GPU + "fabric_cluster_uuid=abc\n", "32 hex digits", id="uuid"),
        pytest.param(HEAD + "[gpu]\nuuid=GPU-a\nname=x\npci_bus_id=zz\n", "PCI bus id", id="bus"),
        pytest.param(
            HEAD + "[gpu]\nuuid=GPU-a\nname=x\n", "lacks required key: pci_bus_id", id="req"
        ),
        pytest.param(HEAD + "[gpu]\nname=x\n" + GPU, ":6: the section before", id="req-mid"),
        pytest.param(HEAD + GPU + GPU, "duplicate GPU uuid", id="dup-uuid"),
        pytest.param(HEAD + GPU + "name2\n", "expected key=value", id="no-equals"),
        pytest.param(HEAD + "[cpu]\n", "unknown section: [cpu]", id="section"),
        pytest.param("driver_version=1\ncuda_driver_version=1\n", "key: format", id="no-format"),
        pytest.param(HEAD.replace("format=1", "format=2"), "unsupported format", id="format"),
        pytest.param(
            HEAD + GPU.replace("name=NVIDIA GB200", "name=" + "x" * 96), "too long", id="long"
        ),
        pytest.param(
            HEAD
            + "".join(
                f"[gpu]\nuuid=GPU-{i}\nname=x\npci_bus_id={i:x}:01:00.0\n" for i in range(65)
            ),
            "too many [gpu] blocks",
            id="too-many",
        ),
    ],
)
def test_malformed_config_is_reported(
    tmp_path: Path, probe: Probe, text: str, message: str
) -> None:
    path = tmp_path / "bad.cfg"
    path.write_text(text)
    res = probe(path, "init", NO_GPUS)
    assert res.data["error"] == "NVMLError_Unknown"
    assert res.stderr.startswith(f"mocknvml: {path}")
    assert message in res.stderr


def test_hand_written_config_gets_defaults(tmp_path: Path, probe: Probe) -> None:
    path = tmp_path / "min.cfg"
    path.write_text(
        "# comment\n\n  " + HEAD + GPU + "\n[gpu]\n uuid = GPU-b \nname=N\npci_bus_id=9:1:0.0\r\n"
    )
    res = probe(path, "inventory")
    assert res.returncode == 0, res.stderr
    a, b = res.data["gpus"]
    assert res.data["nvml_version"] == "13.580.1"
    assert (a["minor"], b["minor"]) == (0, 1)
    assert b["uuid"] == "GPU-b" and b["bus_id"] == "00000009:01:00.0"
    assert a["architecture"] == 0xFFFFFFFF
    assert a["fabric"] == {
        "cluster_uuid": config.ZERO_CLUSTER_UUID,
        "clique_id": 0,
        "state": 0,
        "status": 0,
    }
