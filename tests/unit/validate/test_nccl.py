import os
import sys
from pathlib import Path

import pytest

from compute_domains.infra import errors
from compute_domains.plugin import nodeinfo
from compute_domains.validate import nccl
from compute_domains.validate.report import Status

GIB = 1 << 30
H200 = nccl.Threshold(gpu="NVIDIA H200", min_busbw_gbps=300.0, basis="test")


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (72, 142 / 72)])
def test_bus_factor(n: int, factor: float) -> None:
    assert nccl.bus_factor(n) == pytest.approx(factor)


def test_algbw_and_busbw_follow_nccl_tests() -> None:
    # 8 GiB in 25 ms: algbw = 8589934592 B / 0.025 s = 343.6 GB/s (1 GB = 1e9 B)
    m = nccl.measure(8 * GIB, 25_000.0, 8)
    assert m.algbw_gbps == pytest.approx(343.597, rel=1e-4)
    assert m.busbw_gbps == pytest.approx(343.597 * 1.75, rel=1e-4)
    assert nccl.measure(8 * GIB, 25_000.0, 2).busbw_gbps == pytest.approx(m.algbw_gbps)


def test_sizes_are_the_seeds_sweep() -> None:
    assert [nccl.human_size(s) for s in nccl.SIZES] == ["512M", "1G", "2G", "4G", "8G"]
    assert nccl.human_size(1000) == "1000B"


def test_nvls_stays_off() -> None:
    assert nccl.NVLS_OFF["NCCL_NVLS_ENABLE"] == "0"


def test_threshold_table() -> None:
    assert nccl.threshold_for("NVIDIA H200") is not None
    assert nccl.threshold_for("NVIDIA H200 NVL") is None
    assert nccl.threshold_for("NVIDIA GB200") is None


def _ms(busbw: float, correct: bool = True) -> list[nccl.Measurement]:
    return [
        nccl.Measurement(size=s, time_us=1.0, algbw_gbps=busbw, busbw_gbps=busbw, correct=correct)
        for s in nccl.SIZES
    ]


@pytest.mark.parametrize(
    ("busbw", "correct", "minimum", "statuses"),
    [
        (350.0, True, H200, [Status.PASS, Status.PASS]),
        (250.0, True, H200, [Status.PASS, Status.FAIL]),
        (350.0, False, H200, [Status.FAIL, Status.PASS]),
        (350.0, True, None, [Status.PASS, Status.INFO]),
    ],
)
def test_checks(
    busbw: float, correct: bool, minimum: nccl.Threshold | None, statuses: list[Status]
) -> None:
    assert [c.status for c in nccl.checks(_ms(busbw, correct), 2, "NVIDIA H200", minimum)] == (
        statuses
    )


def test_single_gpu_says_what_is_measurable() -> None:
    found = nccl.checks(_ms(0.0)[:1], 1, "NVIDIA H200", H200)
    assert [c.status for c in found] == [Status.PASS, Status.SKIP]
    assert "needs at least 2 GPUs" in found[1].detail


def test_report_from_worker_results() -> None:
    raw = {
        "world": 2,
        "torch": "2.11.0",
        "nccl": "2.28.3",
        "results": [{"size": s, "time_us": s / 350e3, "correct": True} for s in nccl.SIZES],
    }
    gpu = nodeinfo.GpuInfo(
        index=0, uuid="GPU-0", pci_bus_id="0", name="NVIDIA H200", fabric_state=None
    )
    rep = nccl.build_report(raw, [gpu, gpu], H200)
    assert rep.data["avg_busbw_gbps"] == pytest.approx(350.0)
    assert rep.tables[0].rows[-1][0] == "8G"
    assert rep.tables[0].rows[0][1] == str(512 * (1 << 20) // 4)
    assert rep.verdict is Status.PASS
    assert dict(rep.facts)["GPUs"] == "2 x NVIDIA H200"


def _settings(tmp_path: Path, *extra: str) -> nccl.NcclSettings:
    worker = Path(__file__).with_name("fake_nccl_worker.py")
    return nccl.NcclSettings(
        work_dir=tmp_path,
        worker_argv=(sys.executable, str(worker), *extra),
        env={"PATH": os.environ["PATH"], "NCCL_NVLS_ENABLE": "1"},
        timeout_s=30.0,
    )


def test_workers_run_with_nvlink_multicast_off(tmp_path: Path) -> None:
    doc = nccl.run_workers(_settings(tmp_path), 2, nccl.SIZES)
    assert doc["nvls"] == "0"
    assert doc["world"] == 2 and doc["init"].startswith("tcp://127.0.0.1:")
    assert [r["size"] for r in doc["results"]] == list(nccl.SIZES)
    assert sorted(p.name for p in tmp_path.glob("nccl-rank*.log")) == [
        "nccl-rank0.log",
        "nccl-rank1.log",
    ]


def test_a_failing_worker_is_reported_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(errors.TemporaryError, match="exited 7: worker boom"):
        nccl.run_workers(_settings(tmp_path, "--fail"), 2, nccl.SIZES)


def test_single_gpu_report_shows_no_bandwidth() -> None:
    raw = {"world": 1, "results": [{"size": nccl.SIZES[0], "time_us": 24.4, "correct": True}]}
    gpu = nodeinfo.GpuInfo(
        index=0, uuid="GPU-0", pci_bus_id="0", name="NVIDIA H200", fabric_state=None
    )
    rep = nccl.build_report(raw, [gpu], H200)
    assert rep.tables[0].rows[0][3:5] == ("n/a", "n/a")
    assert dict(rep.facts)["threshold"] == "n/a (1 GPU)"
    assert rep.verdict is Status.PASS
