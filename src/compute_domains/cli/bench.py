"""``cdctl bench``: the command group of the benchmarks on a simulated cluster, and its
``formation`` command (rounds per size and driver, its table and result file).

The group's other commands live beside it: ``churn`` in ``cli/benchchurn.py``, ``report`` and
the result files in ``cli/benchresults.py``, ``bundle`` in ``cli/benchbundle.py``,
``pictures`` in ``cli/benchpictures.py``; a formation round's sim and drivers are
``cli/benchdrivers.py``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from compute_domains.bench import compare, drivers, othersims, placement, roundresults, settle
from compute_domains.cli import (
    benchbundle,
    benchchurn,
    benchdrivers,
    benchpictures,
    benchresults,
    options,
    simoptions,
    tools,
)
from compute_domains.sim import driver


def _table(results: list[dict[str, Any]], workload: str) -> Table:
    table = Table(
        "driver",
        "N",
        "daemons Ready",
        "pods Running",
        "CD Ready",
        "last daemon→CD Ready",
        "teardown",
        "API writes (form)",
        "non-Lease writes/N",
        "controller CPU",
        "plugins CPU",
        title=f"ComputeDomain formation, workload {workload} (median, min..max seconds)",
    )

    def cell(res: dict[str, Any], key: str, digits: int = 1) -> str:
        v = res[key]
        if v is None:  # not measured: the workload has no ComputeDomain
            return "-"
        return f"{v['median']:.{digits}f}s ({v['min']:.{digits}f}..{v['max']:.{digits}f})"

    for res in results:
        table.add_row(
            res["driver"],
            str(res["n"]),
            cell(res, "daemons_ready_s"),
            cell(res, "workloads_running_s"),
            cell(res, "cd_ready_s"),
            cell(res, "last_daemon_to_cd_ready_s", 2),
            cell(res, "teardown_s"),
            f"{res['writes_formation']['median']:.0f}",
            f"{res['writes_formation_no_leases']['median'] / res.get('nodes', res['n']):.1f}",
            f"{res['cpu_s'].get('driver controller', 0.0):.1f}s",
            f"{res['cpu_s'].get('kubelet plugins', 0.0):.1f}s",
        )
    return table


@click.group("bench")
def group() -> None:
    """Benchmarks on the simulated cluster (results under bench/results/)."""


@group.command("formation")
@click.option(
    "--sizes",
    default="4,18,36",
    show_default=True,
    help="Comma-separated pod counts N (--pods-per-node on each domain node).",
)
@click.option(
    "--pods-per-node",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Workload pods per domain node, sharing its GPUs (NVIDIA's issue #816 shape: 4).",
)
@click.option("--repeats", default=3, show_default=True, help="Rounds per driver.")
@click.option("--name", default="bench", show_default=True, help="Name of the sims it starts.")
@click.option("--keep", is_flag=True, help="Leave the last round's sim running afterwards.")
@click.option(
    "--prefix",
    default="",
    help="Result file name prefix (e.g. scale): keeps one-off runs out of `bench report`.",
)
@click.option(
    "--results-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the result file goes (default bench/results/ of this checkout).",
)
@click.option(
    "--workload",
    type=click.Choice([w.value for w in placement.Workload]),
    default=placement.Workload.CLAIMS.value,
    show_default=True,
    help="What the pods ask for: claims (a ComputeDomain, a channel claim each, clique "
    "podAffinity in one rack); affinity (the same pods and placement, no CD, no claim); plain "
    "(no CD, no claim, no podAffinity). The last two measure the floor without a domain.",
)
@click.option(
    "--settle-max",
    type=click.FloatRange(0),
    default=60.0,
    show_default=True,
    help="Before each apply, wait at most this many seconds until the machine's CPU use is low "
    "or no longer falling (the install draining); 0 applies at once.",
)
@simoptions.NODES_MODE
@click.option(
    "--own-watches",
    is_flag=True,
    help="Virtual nodes: every in-process component opens its own watches instead of its "
    "node host's one watch per kind (the baseline of issue 28's comparison).",
)
@benchdrivers.driver_options
def formation_cmd(
    sizes: str,
    pods_per_node: int,
    repeats: int,
    name: str,
    keep: bool,
    prefix: str,
    results_dir: Path | None,
    workload: str,
    settle_max: float,
    nodes_mode: str,
    own_watches: bool,
    driver_args: tuple[str, ...],
    set_args: tuple[str, ...],
    namespace_args: tuple[str, ...],
    release_args: tuple[str, ...],
    image_map_args: tuple[str, ...],
) -> None:
    """Apply → daemons Ready → pods Running → CD Ready, and teardown, for each N and driver
    (without a CD, --workload affinity|plain: apply → pods Running, and teardown).

    Each round is a fresh sim with one driver installed by helm; with several drivers the
    rounds alternate (ours, other, ours, other, ...). Results of ours alone go to
    bench/results/formation-*.json, of several drivers to sidebyside-*.json.
    """
    console = Console()
    ns = sorted({int(s) for s in sizes.split(",") if s.strip()})
    specs = benchdrivers.specs(
        driver_args=driver_args,
        set_args=set_args,
        namespace_args=namespace_args,
        release_args=release_args,
        image_map_args=image_map_args,
        ours_namespace=driver.NAMESPACE,
    )
    bin_dir = tools.build_tools(console).bin_dir
    # Sizes are pod counts; the domain spans pods / pods-per-node nodes, 18 to a rack.
    racks = max(1, math.ceil(max(ns) / pods_per_node / 18))
    plan = drivers.plan(specs, repeats)
    done: list[roundresults.RoundResult] = []
    busy: list[str] = []
    side = len(specs) > 1 or specs[0].name != drivers.OURS
    kind = "sidebyside" if side else "formation"

    def document() -> dict[str, Any]:
        doc = roundresults.document(specs, done)
        doc["nodes_mode"] = nodes_mode
        doc["shared_informers"] = nodes_mode == "virtual" and not own_watches
        doc["pods_per_node"] = pods_per_node  # virtual: node components' CPU is the sim process's
        doc["workload"] = workload
        doc["other_sims"] = busy  # sims that ran beside some round (their load is in the numbers)
        return doc

    out: Path | None = None
    for rnd in plan:
        running = othersims.others(options.sim_home(), own=name)
        if running and not set(running) <= set(busy):
            console.print(othersims.warning(running, options.sim_home()), markup=False)
        busy += [n for n in running if n not in busy]
        console.print(
            f"round {rnd.index + 1}/{len(plan)}: {rnd.driver.name}, repeat "
            f"{rnd.repeat + 1}/{repeats}, load {os.getloadavg()[0]:.1f}"
        )
        done.append(
            benchdrivers.run_round(
                rnd,
                name=name,
                bin_dir=bin_dir,
                racks=racks,
                sizes=ns,
                keep=keep and rnd is plan[-1],
                say=console.print,
                nodes_mode=nodes_mode,
                pods_per_node=pods_per_node,
                shared_informers=not own_watches,
                workload=placement.Workload(workload),
                settling=settle.SettleSettings(max_s=settle_max),
            )
        )
        if rnd is not plan[-1]:
            # A later round cut short (the caller's time limit, a crash) must not take the
            # finished rounds' results with it: the file is rewritten after every round.
            partial = document() | {"partial": f"{len(done)} of {len(plan)} rounds"}
            out = benchresults.write(console, kind, partial, prefix, results_dir, out=out)
    doc = document()
    console.print(_table(doc["results"], workload))
    out = benchresults.write(console, kind, doc, prefix, results_dir, out=out)
    if side:
        written = json.loads(out.read_text())  # with the machine and the final load
        console.print(compare.side_by_side(written, out.name), markup=False)
    if doc["results"]:
        benchpictures.after_run(console, out)
    if doc["failures"]:
        raise click.ClickException(f"not every run formed: {'; '.join(doc['failures'])}")


group.add_command(benchchurn.churn_cmd)
group.add_command(benchresults.report_cmd)
group.add_command(benchbundle.bundle_cmd)
group.add_command(benchpictures.pictures_cmd)
