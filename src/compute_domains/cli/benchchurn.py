"""``cdctl bench churn``: a soak on a simulated cluster, ComputeDomains created and deleted in
parallel lanes with the consistency checked after every cycle (``bench.churn``); its table and
result file.

``churn_cmd`` is added to the ``bench`` group by ``cli/bench.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from rich.console import Console
from rich.table import Table

from compute_domains.bench import churn
from compute_domains.cli import benchresults, options, tools
from compute_domains.infra import kube
from compute_domains.sim import driver, lifecycle, state, topology


@contextlib.contextmanager
def _sim(
    console: Console, name: str, racks: int, keep: bool
) -> Iterator[tuple[state.SimPaths, Path]]:
    """A running sim with the driver (reused when one of that name runs); stopped afterwards."""
    toolset = tools.build_tools(console)
    paths = state.SimPaths(options.sim_home(), name)
    with console.status(f"sim with {racks} racks of 18 nodes and the driver..."):
        started = lifecycle.start(
            paths,
            toolset.bin_dir,
            chart=options.chart_dir(),
            shape=topology.Shape(racks=racks),
            patience=True,
        )
    try:
        yield paths, toolset.bin_dir
    finally:
        if not keep and not started.already_running:
            lifecycle.stop(paths)


async def _churn(
    paths: state.SimPaths, lanes: int, cycles: int, n: int, console: Console
) -> list[churn.Cycle]:
    client = kube.client(kube.KubeSettings(kubeconfig=paths.kubeconfig, field_manager="bench"))
    run_id = uuid.uuid4().hex[:5]
    spaces = [f"churn-{run_id}-{lane}" for lane in range(lanes)]
    for ns in spaces:
        await client.create(Namespace(metadata=ObjectMeta(name=ns)))
    await asyncio.sleep(2)  # the ServiceAccount controller fills the namespaces

    def roots() -> list[Path]:
        base = (paths.root / "nodes").resolve()
        return sorted(p for p in base.iterdir() if p.is_dir())

    async def lane(index: int) -> list[churn.Cycle]:
        done = []
        for k in range(cycles):
            cycle = await churn.one_cycle(
                client,
                lane=index,
                cycle=k,
                n=n,
                ns=spaces[index],
                driver_ns=driver.NAMESPACE,
                node_roots=roots,
            )
            verdict = "ok" if not cycle.problems else f"FAILED: {'; '.join(cycle.problems)}"
            console.print(
                f"lane {index} cycle {k + 1}/{cycles}: formed "
                f"{cycle.formation_s:.1f}s, torn down {cycle.teardown_s:.1f}s, "
                f"{verdict}"
            )
            done.append(cycle)
        return done

    try:
        per_lane = await asyncio.gather(*(lane(i) for i in range(lanes)))
    finally:
        for ns in spaces:
            await client.delete(Namespace, ns)
        await client.close()
    return [c for cs in per_lane for c in cs]


@click.command("churn")
@click.option("--lanes", default=3, show_default=True, help="Parallel create/delete lanes.")
@click.option("--cycles", default=12, show_default=True, help="Cycles per lane.")
@click.option("--nodes", "n", default=2, show_default=True, help="Pods (nodes) per domain.")
@click.option("--racks", default=1, show_default=True)
@click.option("--name", default="churn", show_default=True, help="Sim to use or start.")
@click.option("--keep", is_flag=True, help="Leave the sim running afterwards.")
def churn_cmd(lanes: int, cycles: int, n: int, racks: int, name: str, keep: bool) -> None:
    """Soak: CDs created and deleted in parallel lanes, consistency checked after every cycle."""
    console = Console()
    if lanes * n > racks * 18:
        raise click.UsageError(f"{lanes} lanes x {n} nodes need more than {racks} rack(s)")
    with _sim(console, name, racks, keep) as (paths, _bins):
        cycles_done = asyncio.run(_churn(paths, lanes, cycles, n, console))
    summary = churn.summarize(cycles_done)
    table = Table(
        "lanes",
        "nodes/CD",
        "cycles",
        "failed",
        "formation p50",
        "formation p99",
        "teardown p50",
        "teardown p99",
        title="ComputeDomain churn",
    )
    table.add_row(
        str(lanes),
        str(n),
        str(summary["cycles"]),
        str(summary["failed"]),
        f"{summary['formation_p50_s']:.1f}s",
        f"{summary['formation_p99_s']:.1f}s",
        f"{summary['teardown_p50_s']:.1f}s",
        f"{summary['teardown_p99_s']:.1f}s",
    )
    console.print(table)
    for problem in summary["problems"]:
        console.print(f"[red]{problem}[/red]")
    benchresults.write(
        console,
        "churn",
        {
            "lanes": lanes,
            "nodes_per_cd": n,
            "summary": summary,
            "cycles": [dataclasses.asdict(c) for c in cycles_done],
        },
    )
    if summary["failed"]:
        raise click.ClickException(f"{summary['failed']} of {summary['cycles']} cycles failed")
