"""The channel check end to end through containers.runtime, with a driver stand-in instead of CUDA.

Needs root (private mount namespaces and mknod), as the real check does; skipped otherwise.
"""

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compute_domains.plugin import nodeinfo
from compute_domains.validate import channels, report, scenarios
from compute_domains.validate.report import Status

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[2] / "src"
CHANNEL_MAJOR = 242


def _can_isolate() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run(["unshare", "-m", "true"], check=False).returncode == 0
    except FileNotFoundError:
        return False


pytestmark = pytest.mark.skipif(not _can_isolate(), reason="needs root and mount namespaces")


def _fake_host(root: Path, gpus: int) -> tuple[Path, Path]:
    dev, info = root / "dev", root / "gpus"
    dev.mkdir()
    for name in ["nvidiactl", "nvidia-uvm", *(f"nvidia{i}" for i in range(gpus))]:
        os.mknod(dev / name, 0o20666, os.makedev(1, 3))  # /dev/null's numbers: harmless
    for i in range(gpus):
        (info / f"0000:{0x18 + i:02x}:00.0").mkdir(parents=True)
        (info / f"0000:{0x18 + i:02x}:00.0" / "information").write_text(f"Device Minor:\t {i}\n")
    return dev, info


def _node(gpus: int) -> nodeinfo.NodeInfo:
    return nodeinfo.NodeInfo(
        driver_version="580.159.04",
        gpus=tuple(
            nodeinfo.GpuInfo(
                index=i,
                uuid=f"GPU-{i}",
                pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
                name="NVIDIA H200",
                fabric_state=nodeinfo.FabricState.COMPLETED,
            )
            for i in range(gpus)
        ),
        clique_id="",
        channel_major=CHANNEL_MAJOR,
        caps_major=234,
    )


def _run(tmp_path: Path, gpus: int, **extra: object) -> report.Report:
    dev, info = _fake_host(tmp_path, gpus)
    settings = channels.ChannelSettings(
        work_dir=tmp_path / "work",
        probe_argv=(sys.executable, str(HERE / "fake_probe.py")),
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(SRC), "PYTHONUNBUFFERED": "1"},
        python=sys.executable,
        extra_system_dirs=(str(SRC),),
        timeout_s=30.0,
        dev_root=dev,
        gpus_dir=info,
    )
    settings = dataclasses.replace(settings, **extra)  # type: ignore[arg-type]
    return asyncio.run(channels.run(settings, _node(gpus)))


@pytest.mark.parametrize("gpus", [1, 2])
def test_three_outcomes_through_cdi_and_runtime(tmp_path: Path, gpus: int) -> None:
    rep = _run(tmp_path, gpus)
    assert [c.status for c in rep.checks] == [Status.PASS] * 5, report.render_text(rep)
    assert rep.verdict is Status.PASS
    work = {w["name"]: w for w in rep.data["workloads"]}
    same = work["same-channel"]
    assert same["gpu"] == gpus - 1
    assert same["cdi_devices"][-1] == (
        "k8s.compute-domain.nvidia.com/claim=validate-claim-a2-channel-0"
    )
    chan = [d for d in same["device_nodes"] if "imex-channels" in d["path"]]
    assert chan == [
        {
            "path": "/dev/nvidia-caps-imex-channels/channel0",
            "major": CHANNEL_MAJOR,
            "minor": 0,
            "type": "c",
            "mode": 0o666,
        }
    ]
    assert work["no-channel"]["result"]["error"] == scenarios.NOT_PERMITTED
    spec_files = sorted(p.name for p in (tmp_path / "work" / "cdi").iterdir())
    assert spec_files == [
        "k8s.compute-domain.nvidia.com-claim_validate-claim-a1.json",
        "k8s.compute-domain.nvidia.com-claim_validate-claim-a2.json",
        "k8s.compute-domain.nvidia.com-claim_validate-claim-b.json",
        "validate.compute-domain.nvidia.com-gpu.json",
    ]


def test_a_driver_that_ignores_channels_fails_the_check(tmp_path: Path) -> None:
    rep = _run(
        tmp_path,
        2,
        probe_argv=(sys.executable, str(HERE / "fake_probe.py"), "--ignore-channels"),
    )
    failed = [c.name.split(":")[0] for c in rep.checks if c.status is Status.FAIL]
    assert failed == ["no-channel", "other-channel", "importer-no-channel"]
    assert rep.verdict is Status.FAIL and rep.exit_code == 1
    text = report.render_text(rep)
    assert text.splitlines()[-1].startswith("verdict: FAIL")
