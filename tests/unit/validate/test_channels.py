import json
import os
from pathlib import Path

import pytest

from compute_domains.api import sharedimex
from compute_domains.infra import cdispec, errors
from compute_domains.validate import channels, cuda_probe, scenarios, workloads
from compute_domains.validate.report import Status
from compute_domains.validate.scenarios import Expect

NP = scenarios.NOT_PERMITTED


def _w(expect: Expect, channel: int | None = 0, role: str = "import") -> scenarios.Workload:
    return scenarios.Workload(
        name="w",
        role=role,
        gpu=1,
        claim="c" if channel is not None else None,
        channel=channel,
        expect=expect,
    )


def _r(
    role: str = "import",
    ok: bool = False,
    step: str = "",
    error: str = "",
    matched: bool | None = None,
    chans: tuple[str, ...] = ("channel0",),
) -> cuda_probe.ProbeResult:
    return cuda_probe.ProbeResult(
        role=role,
        ok=ok,
        step=step,
        error=error,
        matched=matched,
        channels=list(chans),
        device="0000:2A:00.0",
        bytes=2 << 20,
    )


def test_plan_puts_importers_on_the_last_gpu() -> None:
    work = scenarios.plan([0, 1, 2, 3], 0, 1)
    assert [(w.name, w.gpu, w.channel) for w in work] == [
        ("no-channel", 0, None),
        ("exporter", 0, 0),
        ("same-channel", 3, 0),
        ("other-channel", 3, 1),
        ("importer-no-channel", 3, None),
    ]
    assert {w.gpu for w in scenarios.plan([0], 5, 9)} == {0}


def test_plan_needs_two_different_channels() -> None:
    with pytest.raises(errors.ConfigError, match="must differ"):
        scenarios.plan([0, 1], 3, 3)


_ALLOC = "cuMemCreate"
_IMPORT = "cuMemImportFromShareableHandle"


@pytest.mark.parametrize(
    ("workload", "result", "status"),
    [
        (
            _w(Expect.REFUSED_ALLOC, None, "alloc"),
            _r("alloc", step=_ALLOC, error=NP, chans=()),
            Status.PASS,
        ),
        (_w(Expect.REFUSED_ALLOC, None, "alloc"), _r("alloc", ok=True, chans=()), Status.FAIL),
        (
            _w(Expect.REFUSED_ALLOC, None, "alloc"),
            _r("alloc", step="cuInit", error="CUDA_ERROR_NO_DEVICE", chans=()),
            Status.FAIL,
        ),
        (_w(Expect.EXPORTED, role="export"), _r("export", ok=True), Status.PASS),
        (_w(Expect.EXPORTED, role="export"), _r("export", step=_ALLOC, error=NP), Status.FAIL),
        (_w(Expect.IMPORT_MATCHES), _r(ok=True, matched=True), Status.PASS),
        (_w(Expect.IMPORT_MATCHES), _r(ok=True, matched=False), Status.FAIL),
        (_w(Expect.IMPORT_MATCHES), _r(step=_IMPORT, error=NP), Status.FAIL),
        (
            _w(Expect.REFUSED_IMPORT, 1),
            _r(step=_IMPORT, error=NP, chans=("channel1",)),
            Status.PASS,
        ),
        (_w(Expect.REFUSED_IMPORT, 1), _r(ok=True, matched=True, chans=("channel1",)), Status.FAIL),
        (
            _w(Expect.REFUSED_IMPORT, 1),
            _r(step="wait-for-export", error="NO_EXPORT", chans=("channel1",)),
            Status.FAIL,
        ),
        # the container must see exactly the channel its claim injected
        (
            _w(Expect.REFUSED_IMPORT, 1),
            _r(step=_IMPORT, error=NP, chans=("channel0",)),
            Status.FAIL,
        ),
        (_w(Expect.IMPORT_MATCHES), None, Status.FAIL),
    ],
)
def test_judge(
    workload: scenarios.Workload, result: cuda_probe.ProbeResult | None, status: Status
) -> None:
    assert scenarios.judge(workload, result, 1).status is status


def test_observed_lines() -> None:
    assert scenarios.observed(_r(step=_IMPORT, error=NP)) == f"{_IMPORT} -> {NP} on 0000:2A:00.0"
    assert scenarios.observed(_r(ok=True, matched=True)).endswith(": data matches")
    assert "DATA DIFFERS" in scenarios.observed(_r(ok=True, matched=False))


def test_channel_claim_is_the_plugins_cdi_spec() -> None:
    claim = workloads.channel_claim("uid-1", 7, major=242)
    assert claim.device_ids == {"channel-0": "k8s.compute-domain.nvidia.com/claim=uid-1-channel-0"}
    doc = cdispec.spec_document(claim.spec)
    assert doc["kind"] == "k8s.compute-domain.nvidia.com/claim"
    node = doc["devices"][0]["containerEdits"]["deviceNodes"][0]
    assert node == {
        "path": "/dev/nvidia-caps-imex-channels/channel7",
        "type": "c",
        "major": 242,
        "minor": 7,
        "fileMode": 0o666,
    }


def test_specs_resolve_like_a_runtime(tmp_path: Path) -> None:
    ctl = cdispec.DeviceNode(path="/dev/nvidiactl", type="c", major=195, minor=255, file_mode=0o666)
    gpu = workloads.HostGpu(
        index=1,
        pci_bus_id="00000000:2A:00.0",
        node=cdispec.DeviceNode(path="/dev/nvidia1", type="c", major=195, minor=1, file_mode=0o666),
    )
    claim = workloads.channel_claim("uid-1", 0, major=242)
    workloads.write_specs(tmp_path, workloads.gpu_spec([gpu], [ctl]), [claim])
    assert (
        json.loads((tmp_path / workloads.GPU_SPEC_FILE).read_text())["kind"] == workloads.GPU_KIND
    )
    ids = [workloads.gpu_device_id(1), claim.device_ids["channel-0"]]
    resolved = workloads.resolve(tmp_path, ids)
    assert [(d.path, d.major, d.minor) for d in resolved.devices] == [
        ("/dev/nvidiactl", 195, 255),
        ("/dev/nvidia1", 195, 1),
        ("/dev/nvidia-caps-imex-channels/channel0", 242, 0),
    ]
    with pytest.raises(workloads.WorkloadError, match="unresolvable"):
        workloads.resolve(tmp_path, ["k8s.compute-domain.nvidia.com/claim=nope-channel-0"])


def test_nodes_without_numbers_take_the_host_nodes(tmp_path: Path) -> None:
    spec = cdispec.Spec(
        version="0.3.0",
        kind=workloads.GPU_KIND,
        devices=(
            cdispec.Device(
                name="null",
                edits=cdispec.ContainerEdits(device_nodes=(cdispec.DeviceNode(path=os.devnull),)),
            ),
        ),
    )
    (tmp_path / "x.json").write_text(cdispec.to_json(spec))
    resolved = workloads.resolve(tmp_path, [f"{workloads.GPU_KIND}=null"])
    assert [(d.path, d.major, d.minor) for d in resolved.devices] == [(os.devnull, 1, 3)]


def test_host_gpus_need_the_control_node(tmp_path: Path) -> None:
    with pytest.raises(workloads.WorkloadError, match="nvidiactl"):
        workloads.host_gpus([], dev_root=tmp_path)


def test_the_per_clique_pair_is_what_two_cds_on_one_clique_get() -> None:
    """``--per-clique`` checks the numbers the scope's allocator hands out: two different
    channels, neither of them 0 (every host-managed IMEX's shared channel)."""
    same, other = channels.per_clique_pair()
    assert (same, other) == (sharedimex.FIRST_CHANNEL, sharedimex.FIRST_CHANNEL + 1)
    scenarios.plan([0, 1], same, other)  # a valid plan: the two channels differ
