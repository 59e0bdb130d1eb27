import ctypes
import dataclasses
import os
import uuid
from pathlib import Path

import pynvml
import pytest

from compute_domains.validate import host, node, report
from compute_domains.validate.report import Status
from tests.unit.validate import fakes


def _settings(
    tmp_path: Path, *, imex_bin: bool = False, imex_unit: bool = False
) -> node.NodeSettings:
    (tmp_path / "devices").write_text(fakes.PROC_DEVICES)
    (tmp_path / "params").write_text("ImexChannelCount: 2048\nCreateImexChannel0: 0\n")
    for sub in ("bin", "units", "proc"):
        (tmp_path / sub).mkdir()
    if imex_bin:
        (tmp_path / "bin" / "nvidia-imex").write_text("")
    if imex_unit:
        (tmp_path / "units" / host.IMEX_UNIT).write_text("")
    return node.NodeSettings(
        proc_devices=tmp_path / "devices",
        channel_dir=tmp_path / "channels",
        driver_params=tmp_path / "params",
        bin_dirs=(str(tmp_path / "bin"),),
        unit_dirs=(str(tmp_path / "units"),),
        proc_root=tmp_path / "proc",
        driver_root=tmp_path / "driver",
        host_dev=tmp_path / "hostdev",
    )


def _statuses(rep: report.Report) -> dict[str, Status]:
    return {c.name: c.status for c in rep.checks}


def test_h200_node_passes_with_empty_clique(tmp_path: Path) -> None:
    nvml = fakes.Nvml(fakes.h200_pair())
    rep = node.build_report(node.gather(_settings(tmp_path), nvml=nvml))
    assert nvml.sessions == 0
    assert rep.verdict is Status.PASS
    assert _statuses(rep) == {
        "gpus": Status.PASS,
        "NVML binding": Status.PASS,
        "plugin discovery": Status.PASS,
        "fabric": Status.PASS,
        "clique": Status.INFO,
        "imex channel major": Status.PASS,
        "nvidia-caps major": Status.PASS,
        "host nvidia-imex": Status.PASS,
        # The H200 has no nvidia-imex: said plainly, not a failure on a node without MNNVL.
        "driver IMEX programs": Status.INFO,
    }
    missing = [r for r in rep.tables[1].rows if r[0] == "MISSING"]
    assert [r[1] for r in missing] == ["/usr/bin/nvidia-imex", "/usr/bin/nvidia-imex-ctl"]
    assert rep.data["base_cdi_spec"]["missing_imex"] == ["nvidia-imex", "nvidia-imex-ctl"]
    facts = dict(rep.facts)
    assert facts["clique id"].startswith("(empty")
    assert facts["imex channel major"] == "242"
    assert facts["ImexChannelCount"] == "2048"
    assert rep.data["gpus"][1]["pci_bus_id"] == "00000000:2A:00.0"
    assert rep.data["gpus"][1]["fabric_state"] == "COMPLETED"
    assert rep.data["clique_id"] == ""


def test_mnnvl_node_shows_clique(tmp_path: Path) -> None:
    cluster = uuid.UUID("8f0e6c1a-3b2d-4e5f-9a8b-7c6d5e4f3a2b")
    gpus = [
        fakes.Gpu(cluster=cluster, clique=3),
        fakes.Gpu(uuid="GPU-2", cluster=cluster, clique=3),
    ]
    rep = node.build_report(node.gather(_settings(tmp_path), nvml=fakes.Nvml(gpus)))
    assert rep.data["clique_id"] == f"{cluster}.3"
    assert _statuses(rep)["clique"] is Status.PASS
    # An MNNVL node without the driver's IMEX programs cannot run ComputeDomain daemons.
    assert _statuses(rep)["driver IMEX programs"] is Status.FAIL


def test_the_report_lists_what_the_base_spec_mounts_from_the_driver_root(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path)
    for name in ("nvidia-imex", "nvidia-imex-ctl"):
        exe = tmp_path / "driver/usr/bin" / name
        exe.parent.mkdir(parents=True, exist_ok=True)
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    rep = node.build_report(node.gather(settings, nvml=fakes.Nvml(fakes.h200_pair())))
    assert _statuses(rep)["driver IMEX programs"] is Status.PASS
    rows = {r[1]: r for r in rep.tables[1].rows}
    assert rows["/usr/bin/nvidia-imex"] == (
        "program",
        "/usr/bin/nvidia-imex",
        str(tmp_path / "driver/usr/bin/nvidia-imex"),
    )
    assert not [r for r in rep.tables[1].rows if r[0] == "MISSING"]


def test_fabric_in_progress_fails_plugin_start(tmp_path: Path) -> None:
    gpus = [fakes.Gpu(state=pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS)]
    rep = node.build_report(node.gather(_settings(tmp_path), nvml=fakes.Nvml(gpus)))
    assert _statuses(rep)["plugin discovery"] is Status.FAIL
    assert _statuses(rep)["fabric"] is Status.WARN
    assert rep.verdict is Status.FAIL


@pytest.mark.parametrize(
    ("binary", "unit", "status"),
    # A packaged binary is what the base CDI spec mounts; only a host service must stay off.
    [(False, False, Status.PASS), (True, False, Status.PASS), (False, True, Status.WARN)],
)
def test_host_imex_installed(tmp_path: Path, binary: bool, unit: bool, status: Status) -> None:
    settings = _settings(tmp_path, imex_bin=binary, imex_unit=unit)
    rep = node.build_report(node.gather(settings, nvml=fakes.Nvml(fakes.h200_pair())))
    assert _statuses(rep)["host nvidia-imex"] is status


def test_running_host_imex_fails(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    (tmp_path / "proc" / "4242").mkdir()
    (tmp_path / "proc" / "4242" / "comm").write_text("nvidia-imex\n")
    (tmp_path / "proc" / "self").mkdir()
    rep = node.build_report(node.gather(settings, nvml=fakes.Nvml(fakes.h200_pair())))
    assert _statuses(rep)["host nvidia-imex"] is Status.FAIL
    assert rep.data["host_imex"]["running_pids"] == (4242,)


@pytest.mark.parametrize(
    ("nvml", "message"),
    [
        (fakes.Nvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND), "NVML cannot start"),
        (fakes.Nvml([]), "NVML sees 0 GPUs"),
    ],
)
def test_no_gpu(tmp_path: Path, nvml: fakes.Nvml, message: str) -> None:
    with pytest.raises(report.NoGpuError, match=message):
        node.gather(_settings(tmp_path), nvml=nvml)


def test_host_helpers(tmp_path: Path) -> None:
    assert host.short_bus_id("00000000:2A:00.0") == "0000:2a:00.0"
    info = tmp_path / "0000:2a:00.0"
    info.mkdir()
    (info / "information").write_text("Model:\t NVIDIA H200\nDevice Minor:\t 1\n")
    assert host.device_minor("00000000:2A:00.0", tmp_path) == 1
    assert host.device_minor("00000000:99:00.0", tmp_path) is None
    assert host.char_device(Path(os.devnull)) == (1, 3)
    assert host.char_device(tmp_path) is None
    assert host.driver_params(tmp_path / "missing") == {}
    assert host.channel_nodes(tmp_path / "missing") == ()


class _Nvml13610(fakes.Nvml):
    """nvidia-ml-py 13.610.43's fabric declaration: clusterUuid 80 bytes, not nvml.h's 16."""

    c_nvmlGpuFabricInfo_t = type(
        "c_nvmlGpuFabricInfo_t",
        (ctypes.Structure,),
        {
            "_fields_": [
                ("clusterUuid", ctypes.c_uint8 * 80),
                ("status", ctypes.c_uint),
                ("cliqueId", ctypes.c_uint32),
                ("state", ctypes.c_uint),
            ]
        },
    )


def test_report_names_the_binding_and_its_layout_and_still_finds_the_clique(
    tmp_path: Path,
) -> None:
    cluster = uuid.UUID("8f0e6c1a-3b2d-4e5f-9a8b-7c6d5e4f3a2b")
    gpus = [dataclasses.replace(g, cluster=cluster, clique=3) for g in fakes.h200_pair()]
    rep = node.build_report(node.gather(_settings(tmp_path), nvml=_Nvml13610(gpus)))
    facts = dict(rep.facts)
    assert facts["NVML binding"] == "fake-nvml 1.0"
    assert facts["clique id"] == f"{cluster}.3"
    (check,) = [c for c in rep.checks if c.name == "NVML binding"]
    assert check.status is Status.PASS
    assert "clusterUuid 80 bytes, C 16" in check.detail
    assert "not used, fabric info read with the C layout" in check.detail
    binding = rep.data["nvml_binding"]
    assert (binding["version"], binding["usable"]) == ("fake-nvml 1.0", True)
    assert "c_nvmlGpuFabricInfo_t: state at offset 88, C 24" in binding["differences"]
