"""``cdctl bench formation``: run the formation benchmark on a simulated cluster, print a table."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import click
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from rich.console import Console
from rich.table import Table

from compute_domains.bench import formation
from compute_domains.cli import options, tools
from compute_domains.infra import kube
from compute_domains.sim import lifecycle, procs, state, topology

_DRIVER_NS = "compute-domains"


def _cpu_seconds(marker: str) -> float:
    """User+system CPU seconds of every process whose command line contains ``marker``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        cmd = " ".join(procs.pid_cmdline(int(entry.name)))
        if marker not in cmd:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


async def _bench(paths: state.SimPaths, bins: Path, sizes: list[int], repeats: int,
                 console: Console) -> list[dict[str, Any]]:
    client = kube.client(kube.KubeSettings(kubeconfig=paths.kubeconfig, field_manager="bench"))

    async def fetch() -> str:
        res = await asyncio.to_thread(subprocess.run, [
            str(bins / "kubectl"), "--kubeconfig", str(paths.kubeconfig), "get", "--raw",
            "/metrics"], capture_output=True, text=True, timeout=60, check=True)
        return res.stdout

    ns = f"bench-{uuid.uuid4().hex[:5]}"
    await client.create(Namespace(metadata=ObjectMeta(name=ns)))
    await asyncio.sleep(2)  # the ServiceAccount controller fills the namespace
    results = []
    try:
        for n in sizes:
            runs = []
            for r in range(repeats):
                cpu0 = {m: _cpu_seconds(m) for m in ("controller run", "plugin run")}
                run = await formation.one_run(client, fetch, n, ns=ns, driver_ns=_DRIVER_NS,
                                              name=f"cd-{n}-{r}")
                cpu = {m: round(_cpu_seconds(m) - cpu0[m], 2) for m in cpu0}
                console.print(f"N={n} run {r + 1}/{repeats}: pods running "
                              f"{run.workloads_running_s:.1f}s, CD Ready {run.cd_ready_s:.1f}s, "
                              f"teardown {run.teardown_s:.1f}s, writes {run.writes_formation}, "
                              f"cpu {cpu}")
                runs.append((run, cpu))
            summary = formation.summarize([r for r, _ in runs])
            summary["cpu_s"] = {m: sorted(c[m] for _, c in runs)[len(runs) // 2]
                                for m in runs[0][1]}
            summary["runs"] = [dataclasses.asdict(r) for r, _ in runs]
            results.append(summary)
    finally:
        await client.delete(Namespace, ns)
        await client.close()
    return results


def _table(results: list[dict[str, Any]]) -> Table:
    table = Table("N", "daemons Ready", "pods Running", "CD Ready", "last daemon→CD Ready",
                  "teardown", "API writes (form)", "controller CPU", "plugins CPU",
                  title="ComputeDomain formation (median, min..max seconds)")
    def cell(res: dict[str, Any], key: str) -> str:
        v = res[key]
        return f"{v['median']:.1f}s ({v['min']:.1f}..{v['max']:.1f})"

    for res in results:
        table.add_row(str(res["n"]), cell(res, "daemons_ready_s"), cell(res, "workloads_running_s"),
                      cell(res, "cd_ready_s"), cell(res, "last_daemon_to_cd_ready_s"),
                      cell(res, "teardown_s"),
                      f"{res['writes_formation']['median']:.0f}",
                      f"{res['cpu_s']['controller run']:.1f}s",
                      f"{res['cpu_s']['plugin run']:.1f}s")
    return table


@click.group("bench")
def group() -> None:
    """Benchmarks on the simulated cluster (results under bench/results/)."""


@group.command("formation")
@click.option("--sizes", default="4,18,36", show_default=True,
              help="Comma-separated pod counts N (one pod per node).")
@click.option("--repeats", default=3, show_default=True)
@click.option("--name", default="bench", show_default=True, help="Sim to use or start.")
@click.option("--keep", is_flag=True, help="Leave the sim running afterwards.")
def formation_cmd(sizes: str, repeats: int, name: str, keep: bool) -> None:
    """Apply → daemons Ready → pods Running → CD Ready, and teardown, for each N."""
    console = Console()
    ns = sorted({int(s) for s in sizes.split(",") if s.strip()})
    toolset = tools.build_tools(console)
    paths = state.SimPaths(options.sim_home(), name)
    racks = max(1, math.ceil(max(ns) / 18))
    with console.status(f"sim with {racks} racks of 18 nodes and the driver..."):
        started = lifecycle.start(paths, toolset.bin_dir, chart=options.chart_dir(),
                                  shape=topology.Shape(racks=racks))
    try:
        results = asyncio.run(_bench(paths, toolset.bin_dir, ns, repeats, console))
    finally:
        if not keep and not started.already_running:
            lifecycle.stop(paths)
    console.print(_table(results))
    out_dir = options.repo_root() / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"formation-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"machine": f"{os.cpu_count()} cores", "results": results},
                              indent=1))
    console.print(f"results written to {out}")
