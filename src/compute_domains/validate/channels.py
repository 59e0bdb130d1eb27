"""``validate imex-channels``: a channel our plugin injects grants fabric memory, and only it does.

The workloads of ``scenarios.plan`` (no channel, exporter, same-channel, other-channel and
channel-less importers) each run ``cuda_probe`` in a container started by ``containers.runtime``
exactly as a simulated pod is (private mount namespace, private ``/dev`` holding only its CDI
device nodes). Channels come from the plugin's CDI output (``workloads``) with the real char
major. The exporter side starts first; the importers start once the export (or its failure)
is on disk in the shared folder mounted at ``/exchange``; the exporter frees its memory when
the importers are done. ``scenarios.judge`` turns each result into a check. ``run`` needs
root and a GPU.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from compute_domains.api import sharedimex
from compute_domains.containers import runtime
from compute_domains.infra import cdispec, errors
from compute_domains.plugin import cdi, discovery, nodeinfo
from compute_domains.validate import cuda_probe, host, report, scenarios, workloads

EXCHANGE_MOUNT = "/exchange"
"""Where every workload container sees the shared exchange folder."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ChannelSettings:
    """How ``imex-channels`` runs (all paths and the environment come from the CLI)."""

    work_dir: Path
    """Empty scratch folder: CDI specs, container state, exchange folder, logs."""
    probe_argv: tuple[str, ...]
    """Command that starts the probe, without its arguments."""
    env: Mapping[str, str]
    """Base environment of every workload container (PATH, PYTHONPATH, LD_LIBRARY_PATH...)."""
    python: str
    """Interpreter that runs ``containers.container_init``."""
    extra_system_dirs: tuple[str, ...] = ()
    """Host folders shown read-only in containers besides ``containers.runtime.SYSTEM_DIRS``."""
    same_channel: int = 0
    """Channel N of the exporter and the same-channel importer (the plugin's Single mode: 0)."""
    other_channel: int = 1
    """Channel M of the other-channel importer."""
    scope: str = ""
    """Where N and M come from (a fact of the report)."""
    timeout_s: float = 120.0
    """Overall limit for the workloads."""
    all_gpus: bool = False
    """Give every container all GPUs instead of only its own (a fallback for odd drivers)."""
    dev_root: Path = Path("/dev")
    """Host device folder (GPU node numbers are read there)."""
    gpus_dir: Path = host.DRIVER_GPUS
    """The driver's per-GPU information folders (device minors)."""


def per_clique_pair() -> tuple[int, int]:
    """The channels of two CDs on one clique in the per-clique scope: CD A's (the exporter's and
    the same-channel importer's) and CD B's (the other-channel importer's), as the plugin's
    allocation in the clique's shared registry hands them out (``api.sharedimex``)."""
    first, _ = sharedimex.allocate({}, "validate-cd-a")
    held = {sharedimex.channel_key("validate-cd-a"): str(first)}
    second, _ = sharedimex.allocate(held, "validate-cd-b")
    return first, second


def validate(settings: ChannelSettings, *, nvml: Any | None = None) -> report.Report:
    """Run the channel check on this node (blocking; needs root and a GPU).

    Raises:
        report.NoGpuError: no GPU here.
        errors.ConfigError: not root, or the driver has no IMEX channel major.
    """
    host.require_gpus(nvml)
    node = discovery.NvmlDiscovery(strict_fabric=False, nvml=nvml).discover()
    if os.geteuid() != 0:
        raise errors.ConfigError("imex-channels needs root (private mount namespaces, mknod)")
    return asyncio.run(run(settings, node))


async def run(settings: ChannelSettings, node: nodeinfo.NodeInfo) -> report.Report:
    """Write the CDI specs, run the workloads, judge them."""
    if node.channel_major is None:
        raise errors.ConfigError(f"/proc/devices lists no {discovery.IMEX_CHANNELS_DEVICE}")
    gpus, control = await asyncio.to_thread(
        workloads.host_gpus, node.gpus, dev_root=settings.dev_root, gpus_dir=settings.gpus_dir
    )
    by_index = {g.index: g for g in gpus}
    work = scenarios.plan(sorted(by_index), settings.same_channel, settings.other_channel)
    cdi_dir, exchange, logs = (settings.work_dir / d for d in ("cdi", "exchange", "logs"))
    for folder in (exchange, logs):
        folder.mkdir(parents=True, exist_ok=True)
    claims = {
        w.claim: workloads.channel_claim(w.claim, w.channel, major=node.channel_major)
        for w in work
        if w.claim is not None and w.channel is not None
    }
    workloads.write_specs(cdi_dir, workloads.gpu_spec(gpus, control), list(claims.values()))
    rt = runtime.Runtime(
        runtime.RuntimeSettings(
            isolate=True, python=settings.python, extra_system_dirs=settings.extra_system_dirs
        ),
        settings.work_dir / "state",
    )
    ids = {w.name: _cdi_ids(w, sorted(by_index), settings.all_gpus, claims) for w in work}
    configs = {}
    for w in work:
        resolved = workloads.resolve(cdi_dir, ids[w.name], host_root=settings.dev_root.parent)
        argv = [*settings.probe_argv, w.role, "--exchange", EXCHANGE_MOUNT]
        argv += ["--pci-bus-id", by_index[w.gpu].pci_bus_id, "--timeout", str(settings.timeout_s)]
        configs[w.name] = workloads.container_config(
            argv,
            resolved,
            env=settings.env,
            mounts=[runtime.Mount(source=str(exchange), target=EXCHANGE_MOUNT)],
            hostname=w.name,
        )
    rcs = await _run_containers(rt, work, configs, exchange, logs, settings.timeout_s)
    results = {w.name: cuda_probe.parse_result(_read(logs / f"{w.name}.log")) for w in work}
    return build_report(settings, node, work, ids, configs, results, rcs, by_index, claims)


async def _run_containers(
    rt: runtime.Runtime,
    work: Sequence[scenarios.Workload],
    configs: Mapping[str, runtime.ContainerConfig],
    exchange: Path,
    logs: Path,
    timeout_s: float,
) -> dict[str, int | None]:
    """Exporter side first; importers once the export (or its failure) is on disk."""
    deadline = time.monotonic() + timeout_s
    running: dict[str, runtime.Running] = {}
    rcs: dict[str, int | None] = {w.name: None for w in work}

    async def start(w: scenarios.Workload) -> None:
        running[w.name] = await rt.start(w.name, configs[w.name], logs / f"{w.name}.log")

    async def wait(name: str) -> None:
        left = max(deadline - time.monotonic(), 0.1)
        try:
            async with asyncio.timeout(left):
                rcs[name] = await running[name].child.proc.wait()
        except TimeoutError:
            rcs[name] = await running[name].child.stop(grace=2.0)

    try:
        for w in work:
            if w.role != "import":
                await start(w)
        exporter = running.get("exporter")
        while time.monotonic() < deadline and not any(
            (exchange / f).exists() for f in (cuda_probe.EXPORT_FILE, cuda_probe.FAILED_FILE)
        ):
            if exporter is not None and exporter.child.proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        for w in work:
            if w.role == "import":
                await start(w)
        await asyncio.gather(*(wait(w.name) for w in work if w.role == "import"))
        (exchange / cuda_probe.RELEASE_FILE).touch()
        await asyncio.gather(*(wait(w.name) for w in work if w.role != "import"))
    finally:
        for name, r in running.items():
            if r.child.proc.returncode is None:
                rcs[name] = await r.child.stop(grace=2.0)
            rt.remove(name)
    return rcs


def build_report(
    settings: ChannelSettings,
    node: nodeinfo.NodeInfo,
    work: Sequence[scenarios.Workload],
    ids: Mapping[str, Sequence[str]],
    configs: Mapping[str, runtime.ContainerConfig],
    results: Mapping[str, cuda_probe.ProbeResult | None],
    rcs: Mapping[str, int | None],
    gpus: Mapping[int, workloads.HostGpu],
    claims: Mapping[str, cdi.ClaimSpec],
) -> report.Report:
    """The channel report: one check and one table row per workload."""
    checks = tuple(scenarios.judge(w, results[w.name], rcs[w.name]) for w in work)
    rows = tuple(
        (
            w.name,
            f"{w.gpu} ({gpus[w.gpu].pci_bus_id})",
            "-" if w.channel is None else f"channel{w.channel} ({w.claim})",
            _nodes_text(configs[w.name].devices),
            scenarios.observed(r) if (r := results[w.name]) else f"no result (exit {rcs[w.name]})",
        )
        for w in work
    )
    table = report.Table(
        title="workloads (containers started by containers.runtime, devices from CDI)",
        columns=("workload", "gpu", "channel (claim)", "device nodes", "observed"),
        rows=rows,
    )
    single = len(gpus) == 1
    facts = (
        ("driver version", node.driver_version),
        ("imex channel major", str(node.channel_major)),
        ("channels", f"N={settings.same_channel}, M={settings.other_channel}"),
        ("channel source", settings.scope or "given"),
        ("exporter GPU", f"{work[0].gpu} ({gpus[work[0].gpu].pci_bus_id})"),
        (
            "importer GPU",
            f"{work[-1].gpu} ({gpus[work[-1].gpu].pci_bus_id})"
            + (" - single GPU: imports on itself" if single else ""),
        ),
        ("CDI folder", str(settings.work_dir / "cdi")),
    )
    data = {
        "channel_major": node.channel_major,
        "channels": {
            "same": settings.same_channel,
            "other": settings.other_channel,
            "source": settings.scope,
        },
        "claim_specs": {uid: cdispec.spec_document(c.spec) for uid, c in claims.items()},
        "workloads": [
            {
                "name": w.name,
                "role": w.role,
                "gpu": w.gpu,
                "claim": w.claim,
                "channel": w.channel,
                "expect": w.expect.value,
                "cdi_devices": list(ids[w.name]),
                "device_nodes": [dataclasses.asdict(d) for d in configs[w.name].devices],
                "exit_code": rcs[w.name],
                "result": dataclasses.asdict(r) if (r := results[w.name]) else None,
            }
            for w in work
        ],
    }
    return report.Report(
        command="imex-channels", facts=facts, tables=(table,), checks=checks, data=data
    )


def _cdi_ids(
    w: scenarios.Workload,
    gpu_indexes: Sequence[int],
    all_gpus: bool,
    claims: Mapping[str, cdi.ClaimSpec],
) -> list[str]:
    """The workload's CDI devices: its GPU(s), then its claim's channel device (plugin output)."""
    gpu_ids = [workloads.gpu_device_id(i) for i in (gpu_indexes if all_gpus else [w.gpu])]
    if w.claim is None:
        return gpu_ids
    return [*gpu_ids, claims[w.claim].device_ids[workloads.CHANNEL_SLOT]]


def _nodes_text(devices: Sequence[runtime.DeviceNode]) -> str:
    """The GPU and channel nodes of a container (control nodes left out), ``path=major:minor``."""
    shown = [d for d in devices if Path(d.path).name not in workloads.CONTROL_NODES]
    return " ".join(f"{d.path}={d.major}:{d.minor}" for d in shown)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
