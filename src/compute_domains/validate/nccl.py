"""``validate nccl``: the single-node NVLink all-reduce baseline (PyTorch + NCCL, one rank a GPU).

The seed's guide starts every cluster validation with nccl-tests' ``all_reduce_perf -b 512M
-e 8G -f 2``; this runs the same message sizes through ``torch.distributed`` (``nccl_worker``,
one process per GPU) and reports what nccl-tests reports:

- algorithm bandwidth ``algbw = size / time`` (GB/s, 1 GB = 1e9 bytes; size in bytes of one rank's
  buffer, time of one all-reduce on the slowest rank);
- bus bandwidth ``busbw = algbw * 2(n-1)/n`` for all-reduce (the bandwidth a link would need for
  a ring to reach that time; comparable across GPU counts);
- the average busbw over all sizes ("Avg bus bandwidth"), which is compared with the minimum
  for the GPU type (``THRESHOLDS``, or ``--min-busbw``).

With one GPU the bus factor is 0: an all-reduce moves nothing between GPUs, so only NCCL's
start-up and a correct result are checked. Every worker runs with NVLink multicast off
(``NVLS_OFF`` overrides the given environment).

Size: about 300 lines for one command: the bandwidth arithmetic, the checks, the report and the
worker launch share the measurements' shape and read best in one place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import subprocess
import time
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from compute_domains.infra import errors
from compute_domains.plugin import discovery, nodeinfo
from compute_domains.validate import host, report
from compute_domains.validate.report import Check, Status

MIB = 1 << 20
SIZES = tuple(512 * MIB << k for k in range(5))
"""512 MiB, 1, 2, 4 and 8 GiB: nccl-tests' ``-b 512M -e 8G -f 2``."""
NVLS_OFF: Mapping[str, str] = types.MappingProxyType(
    {
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1",
    }
)
"""Set in every worker: NVLink multicast can take a shared host's GPUs out of service."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Threshold:
    """Minimum average all-reduce busbw for one GPU type, and where the number comes from."""

    gpu: str
    """NVML's GPU name (``nvidia-smi`` name), matched exactly."""
    min_busbw_gbps: float
    basis: str


THRESHOLDS = (
    Threshold(
        gpu="NVIDIA H200",
        min_busbw_gbps=285.0,
        basis="85% of 334.8 GB/s measured 2026-11-29 on 2 H200 (NV18), NCCL 2.28.9, NVLS off",
    ),
)
"""Pass thresholds per GPU type (docs/validation.md records the measurements behind them)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NcclSettings:
    """How ``validate nccl`` runs."""

    work_dir: Path
    """Scratch folder: worker logs and the results file."""
    worker_argv: tuple[str, ...]
    """Command that starts one rank, without its arguments."""
    env: Mapping[str, str]
    """Base environment of the workers (``NVLS_OFF`` is applied on top)."""
    sizes: tuple[int, ...] = SIZES
    warmup: int = 5
    iters: int = 20
    timeout_s: float = 300.0
    min_busbw_gbps: float | None = None
    """Overrides the table's threshold."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Measurement:
    """One message size."""

    size: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    correct: bool


def bus_factor(n: int) -> float:
    """nccl-tests' all-reduce bus factor ``2(n-1)/n``."""
    return 2.0 * (n - 1) / n


def measure(size: int, time_us: float, n: int, correct: bool = True) -> Measurement:
    """algbw and busbw of one all-reduce of ``size`` bytes that took ``time_us``."""
    algbw = size / (time_us * 1e-6) / 1e9
    return Measurement(
        size=size,
        time_us=time_us,
        algbw_gbps=algbw,
        busbw_gbps=algbw * bus_factor(n),
        correct=correct,
    )


def threshold_for(gpu_name: str, table: Sequence[Threshold] = THRESHOLDS) -> Threshold | None:
    """The table entry for this GPU name, if any."""
    return next((t for t in table if t.gpu == gpu_name), None)


def average_busbw(ms: Sequence[Measurement]) -> float:
    """nccl-tests' "Avg bus bandwidth": the mean busbw over all sizes."""
    return sum(m.busbw_gbps for m in ms) / len(ms) if ms else 0.0


def checks(
    ms: Sequence[Measurement], n: int, gpu_name: str, minimum: Threshold | None
) -> tuple[Check, ...]:
    """Correctness and bandwidth checks for ``n`` GPUs of type ``gpu_name``."""
    wrong = [human_size(m.size) for m in ms if not m.correct]
    out = [
        Check(
            name="all-reduce result",
            status=Status.FAIL if wrong or not ms else Status.PASS,
            detail=f"wrong sums at {', '.join(wrong)}"
            if wrong
            else f"correct at all {len(ms)} sizes"
            if ms
            else "no results",
        )
    ]
    if n < 2:
        out.append(
            Check(
                name="bus bandwidth",
                status=Status.SKIP,
                detail="1 GPU: an all-reduce moves no data between GPUs (bus factor "
                "2(n-1)/n = 0); NVLink bandwidth needs at least 2 GPUs. Measured: NCCL starts "
                "and reduces correctly",
            )
        )
        return tuple(out)
    avg = average_busbw(ms)
    if minimum is None:
        out.append(
            Check(
                name="bus bandwidth",
                status=Status.INFO,
                detail=f"avg busbw {avg:.1f} GB/s; no threshold for {gpu_name!r} "
                "(pass --min-busbw)",
            )
        )
    else:
        good = avg >= minimum.min_busbw_gbps
        out.append(
            Check(
                name="bus bandwidth",
                status=Status.PASS if good else Status.FAIL,
                detail=f"avg busbw {avg:.1f} GB/s {'>=' if good else '<'} "
                f"{minimum.min_busbw_gbps:.0f} GB/s ({minimum.gpu}: {minimum.basis})",
            )
        )
    return tuple(out)


def human_size(size: int) -> str:
    """``512M``, ``8G`` (binary units, as nccl-tests' arguments)."""
    for unit, scale in (("G", 1 << 30), ("M", MIB), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


def build_report(
    raw: Mapping[str, Any], gpus: Sequence[nodeinfo.GpuInfo], minimum: Threshold | None
) -> report.Report:
    """The report from the workers' results document."""
    n = int(raw["world"])
    ms = [
        measure(int(r["size"]), float(r["time_us"]), n, bool(r["correct"])) for r in raw["results"]
    ]
    name = gpus[0].name if gpus else str(raw.get("device", "?"))
    multi = n > 1  # with one rank an all-reduce is a no-op: its "bandwidth" means nothing
    table = report.Table(
        title="all-reduce, float32 sum, in place (nccl-tests columns)",
        columns=("size", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong"),
        rows=tuple(
            (
                human_size(m.size),
                str(m.size // 4),
                f"{m.time_us:.1f}",
                f"{m.algbw_gbps:.2f}" if multi else "n/a",
                f"{m.busbw_gbps:.2f}" if multi else "n/a",
                "0" if m.correct else ">0",
            )
            for m in ms
        ),
    )
    facts = (
        ("GPUs", f"{n} x {name}"),
        ("torch / NCCL", f"{raw.get('torch', '?')} / {raw.get('nccl', '?')}"),
        ("NVLink multicast", "off (NCCL_NVLS_ENABLE=0)"),
        ("bus factor", f"2(n-1)/n = {bus_factor(n):.3f}"),
        ("avg busbw", f"{average_busbw(ms):.2f} GB/s" if multi else "n/a (1 GPU)"),
        ("threshold", _threshold_text(minimum) if multi else "n/a (1 GPU)"),
    )
    data = {
        "world": n,
        "gpu": name,
        "torch": raw.get("torch"),
        "nccl": raw.get("nccl"),
        "avg_busbw_gbps": average_busbw(ms),
        "threshold": dataclasses.asdict(minimum) if minimum else None,
        "results": [dataclasses.asdict(m) for m in ms],
    }
    return report.Report(
        command="nccl",
        facts=facts,
        tables=(table,),
        checks=checks(ms, n, name, minimum),
        data=data,
    )


def _threshold_text(minimum: Threshold | None) -> str:
    return f"{minimum.min_busbw_gbps:.0f} GB/s ({minimum.basis})" if minimum else "none"


def validate(settings: NcclSettings, *, nvml: Any | None = None) -> report.Report:
    """Run the benchmark on every GPU of this node (blocking).

    Raises:
        report.NoGpuError: no GPU here.
        errors.TemporaryError: a worker failed or the run timed out (its log tail is included).
    """
    host.require_gpus(nvml)
    gpus = discovery.NvmlDiscovery(strict_fabric=False, nvml=nvml).discover().gpus
    name = gpus[0].name if gpus else ""
    minimum = threshold_for(name)
    if settings.min_busbw_gbps is not None:
        minimum = Threshold(gpu=name, min_busbw_gbps=settings.min_busbw_gbps, basis="--min-busbw")
    sizes = settings.sizes if len(gpus) > 1 else settings.sizes[:1]
    raw = run_workers(settings, len(gpus), sizes)
    return build_report(raw, gpus, minimum)


def run_workers(settings: NcclSettings, world: int, sizes: Sequence[int]) -> dict[str, Any]:
    """Start one worker per GPU, wait for all, return rank 0's results document."""
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    out = settings.work_dir / "nccl-result.json"
    out.unlink(missing_ok=True)
    env = {**settings.env, **NVLS_OFF}
    init = f"tcp://127.0.0.1:{_free_port()}"
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    deadline = time.monotonic() + settings.timeout_s
    try:
        for rank in range(world):
            log = settings.work_dir / f"nccl-rank{rank}.log"
            argv = [*settings.worker_argv, "--rank", str(rank), "--world", str(world)]
            argv += ["--init", init, "--sizes", ",".join(map(str, sizes)), "--out", str(out)]
            argv += ["--warmup", str(settings.warmup), "--iters", str(settings.iters)]
            with log.open("wb") as fh:
                procs.append(
                    (subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT), log)
                )
        for proc, log in procs:
            left = max(deadline - time.monotonic(), 0.1)
            try:
                rc = proc.wait(timeout=left)
            except subprocess.TimeoutExpired as err:
                raise errors.TemporaryError(
                    f"NCCL worker timed out after {settings.timeout_s:.0f}s: {_tail(log)}"
                ) from err
            if rc != 0:
                raise errors.TemporaryError(f"NCCL worker exited {rc}: {_tail(log)}")
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tail(log: Path, lines: int = 5) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return f"(no log at {log})"
    return " | ".join(text.strip().splitlines()[-lines:])
