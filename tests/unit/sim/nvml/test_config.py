"""Config model, renderer and profiles of the mock NVML (pure Python, no library needed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from compute_domains.infra import errors
from compute_domains.sim.nvml import config, profiles


def test_render_is_deterministic_and_complete() -> None:
    cfg = profiles.gb200(1, 2)
    text = config.render(cfg)
    assert text == config.render(profiles.gb200(1, 2))
    lines = text.splitlines()
    assert lines[1:6] == [
        "format=1",
        "driver_version=580.95.05",
        "cuda_driver_version=13000",
        "nvml_version=13.580.95.05",
        "init_return=0",
    ]
    assert lines.count("[gpu]") == 4
    assert f"uuid={cfg.gpus[0].uuid}" in lines
    assert f"fabric_cluster_uuid={profiles.cluster_uuid(1)}" in lines
    assert "fabric_state=3" in lines
    assert "fabric_health_mask=0xaa" in lines
    assert "pci_device_id=0x294110de" in lines
    assert "compute_capability=10.0" in lines


def test_write_replaces_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nodes" / "n0.cfg"
    config.write(path, profiles.fabric_in_progress(0, 0))
    config.write(path, profiles.gb200(0, 0))
    assert path.read_text() == config.render(profiles.gb200(0, 0))


def test_identities_are_deterministic_and_distinct() -> None:
    assert profiles.gpu_uuid(0, 1, 2) == profiles.gpu_uuid(0, 1, 2)
    ids = {profiles.gpu_uuid(r, n, g) for r in range(3) for n in range(3) for g in range(4)}
    assert len(ids) == 36
    assert all(i.startswith("GPU-") and len(i) == 40 for i in ids)
    assert profiles.cluster_uuid(0) != profiles.cluster_uuid(1)
    a, b = profiles.gb200(7, 0), profiles.gb200(7, 1)
    assert a.cluster_uuid == b.cluster_uuid and a.gpus[0].uuid != b.gpus[0].uuid


@pytest.mark.parametrize("profile", list(profiles.Profile))
def test_every_profile_builds_and_renders(profile: profiles.Profile) -> None:
    cfg = profiles.for_profile(profile, rack=0, node=3, gpus=2)
    assert len(cfg.gpus) == 2
    assert config.render(cfg).count("[gpu]") == 2


def test_profile_fabric_answers() -> None:
    gb = profiles.gb200(0, 0)
    assert (gb.fabric_state, gb.fabric_status, gb.clique_id) == (3, 0, 1)
    assert gb.gpus[0].name == "NVIDIA GB200"
    assert gb.gpus[0].architecture == config.Architecture.BLACKWELL
    h = profiles.h200(0, 0)
    assert (h.cluster_uuid, h.fabric_state, h.fabric_status) == (config.ZERO_CLUSTER_UUID, 3, 0)
    assert len(h.gpus) == 8 and h.gpus[0].architecture == config.Architecture.HOPPER
    assert profiles.fabric_in_progress(0, 0).fabric_state == config.FabricState.IN_PROGRESS
    assert profiles.fabric_error(0, 0).fabric_status != 0
    assert profiles.no_fabric(0, 0).fabric_return == config.NvmlReturn.NOT_SUPPORTED


def test_nvml_and_cuda_versions() -> None:
    cfg = config.NodeNvmlConfig(driver_version="570.1.2", cuda_version="12.8", gpus=())
    assert cfg.cuda_driver_version == 12080
    assert cfg.effective_nvml_version == "12.570.1.2"
    other = dataclasses.replace(cfg, nvml_version="12.570.1.2-custom")
    assert other.effective_nvml_version == "12.570.1.2-custom"


def test_process_env() -> None:
    env = config.process_env(Path("/lib/mock"), Path("/etc/n0.cfg"))
    assert env == {"LD_LIBRARY_PATH": "/lib/mock", "MOCK_NVML_CONFIG": "/etc/n0.cfg"}
    env = config.process_env(Path("/lib/mock"), Path("/c"), ld_library_path="/usr/lib")
    assert env["LD_LIBRARY_PATH"] == "/lib/mock:/usr/lib"


GPU = profiles.gb200(0, 0).gpus[0]


def _gpu(**changes: Any) -> config.GpuSpec:
    return dataclasses.replace(GPU, **changes)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: _gpu(uuid="1234"), id="uuid-prefix"),
        pytest.param(lambda: _gpu(uuid="GPU-XYZ"), id="uuid-garbage"),
        pytest.param(lambda: _gpu(uuid=GPU.uuid.upper()), id="uuid-case"),
        pytest.param(lambda: _gpu(pci_bus_id="8:01"), id="bus-id"),
        pytest.param(lambda: _gpu(pci_bus_id="0:01:20.0"), id="bus-device-range"),
        pytest.param(lambda: _gpu(name=""), id="empty-name"),
        pytest.param(lambda: _gpu(name="a\nb=c"), id="newline"),
        pytest.param(lambda: _gpu(name=" padded"), id="padded"),
        pytest.param(lambda: _gpu(name="x" * 96), id="long-name"),
        pytest.param(lambda: _gpu(memory_used_bytes=GPU.memory_total_bytes + 1), id="memory"),
        pytest.param(lambda: _gpu(minor=-1), id="minor"),
        pytest.param(lambda: config.FabricInfo(cluster_uuid="nope"), id="cluster-uuid"),
        pytest.param(lambda: config.FabricInfo(clique_id=2**32), id="clique-range"),
        pytest.param(lambda: config.FabricInfo(health_summary=256), id="summary-range"),
        pytest.param(
            lambda: config.NodeNvmlConfig(driver_version="1", cuda_version="13", gpus=()),
            id="cuda-version",
        ),
        pytest.param(
            lambda: config.NodeNvmlConfig(driver_version="1", cuda_version="13.0", gpus=(GPU, GPU)),
            id="duplicate-gpu",
        ),
        pytest.param(
            lambda: config.NodeNvmlConfig(
                driver_version="1",
                cuda_version="13.0",
                gpus=(GPU, _gpu(uuid=profiles.gpu_uuid(9, 9, 9), pci_bus_id="8:1:0.0")),
            ),
            id="duplicate-bus-id",
        ),
        pytest.param(lambda: profiles.gb200(0, 0, gpus=65), id="too-many-gpus"),
        pytest.param(lambda: profiles.gb200(0, 0, clique_id=-1), id="node-clique"),
    ],
)
def test_invalid_configs_are_refused(make: Any) -> None:
    with pytest.raises(errors.ConfigError):
        make()


def test_gpu_spec_with_caller_identities() -> None:
    gpu = profiles.gpu_spec(
        profiles.GpuModel.H200, uuid=profiles.gpu_uuid(0, 0, 0), pci_bus_id="0000:10:00.0"
    )
    assert (gpu.name, gpu.architecture, gpu.compute_capability) == (
        "NVIDIA H200",
        config.Architecture.HOPPER,
        (9, 0),
    )
    assert gpu.pci_bus_id == "0000:10:00.0"
