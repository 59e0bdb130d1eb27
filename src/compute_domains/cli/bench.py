"""``cdctl bench formation|churn|report``: benchmarks on a simulated cluster, results, tables.

Size: about 300 lines for one command group; its three commands share the sim set-up, the
result files and the table rendering.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace
from rich.console import Console
from rich.table import Table

from compute_domains.bench import (
    churn,
    compare,
    drivers,
    floor,
    othersims,
    placement,
    report,
    rounds,
    scale,
    settle,
    writes,
)
from compute_domains.cli import benchbundle, benchdrivers, benchpictures, options, simoptions, tools
from compute_domains.infra import kube
from compute_domains.sim import lifecycle, state, topology

_DRIVER_NS = "compute-domains"


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


def _write(
    console: Console,
    kind: str,
    doc: dict[str, Any],
    prefix: str = "",
    out_dir: Path | None = None,
    *,
    out: Path | None = None,
) -> Path:
    """Write a result document under ``out_dir`` (default bench/results/) with the machine it
    ran on, or over ``out`` (an earlier, partial write of the same run); a ``prefix`` keeps a
    one-off run out of the tables ``cdctl bench report`` builds from the newest
    ``formation-*``/``sidebyside-*`` files."""
    if out is None:
        out_dir = out_dir or options.repo_root() / "bench" / "results"
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = out_dir / f"{prefix + '-' if prefix else ''}{kind}-{stamp}.json"
    load = os.getloadavg()[0]
    out.write_text(
        json.dumps(
            {"machine": f"{os.cpu_count()} cores", "load_at_end": load, **doc},
            indent=1,
            default=str,
        )
    )
    console.print(f"results written to {out}")
    return out


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
        ours_namespace=_DRIVER_NS,
    )
    bin_dir = tools.build_tools(console).bin_dir
    # Sizes are pod counts; the domain spans pods / pods-per-node nodes, 18 to a rack.
    racks = max(1, math.ceil(max(ns) / pods_per_node / 18))
    plan = drivers.plan(specs, repeats)
    done: list[rounds.RoundResult] = []
    busy: list[str] = []
    side = len(specs) > 1 or specs[0].name != drivers.OURS
    kind = "sidebyside" if side else "formation"

    def document() -> dict[str, Any]:
        doc = rounds.document(specs, done)
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
            out = _write(console, kind, partial, prefix, results_dir, out=out)
    doc = document()
    console.print(_table(doc["results"], workload))
    out = _write(console, kind, doc, prefix, results_dir, out=out)
    if side:
        written = json.loads(out.read_text())  # with the machine and the final load
        console.print(compare.side_by_side(written, out.name), markup=False)
    if doc["results"]:
        benchpictures.after_run(console, out)
    if doc["failures"]:
        raise click.ClickException(f"not every run formed: {'; '.join(doc['failures'])}")


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
                driver_ns=_DRIVER_NS,
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


@group.command("churn")
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
    _write(
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


@group.command("report")
@click.option(
    "--doc",
    "doc_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Markdown file with bench blocks to rewrite (default docs/benchmarks.md).",
)
@click.option(
    "--pictures/--no-pictures",
    default=True,
    show_default=True,
    help="Also draw the formation curve and phase bars (PNG, beside the result files; needs "
    "matplotlib, the `bench` extra) and show them in the blocks.",
)
def report_cmd(doc_path: Path | None, pictures: bool) -> None:
    """Rewrite the tables in docs/benchmarks.md from the newest results of each kind (and the
    writes-per-kind block from the two result files its marker names); draw the pictures of
    those results and of every `bench:figures` block's files."""
    console = Console()
    root = options.repo_root()
    results = root / "bench" / "results"
    doc_path = doc_path or root / "docs" / "benchmarks.md"
    drawing = benchpictures.module() if pictures else None  # refused before anything is written
    blocks = {}
    drawn: list[Path] = []
    try:
        for kind in report.KINDS:
            found = report.latest(results, kind)
            if found is None:
                console.print(f"no {kind} results under bench/results/: its table is left as it is")
                continue
            path, doc = found
            blocks[kind] = report.render(kind, doc, str(path.relative_to(root)))
            if drawing is not None and kind != "churn":
                shown = drawing.for_file(path)
                blocks[kind] += "\n\n" + drawing.links(shown, doc_path.parent)
                drawn += shown
        blocks["scale"] = scale.table(results)  # every scale run, issue 15
        blocks["floor"] = floor.table(results)  # without a CD, issues 26 and 28
        text = report.update_doc(doc_path.read_text(), blocks)
        text = writes.update_doc(text, results)
        if drawing is not None:
            text, across = drawing.update_doc(text, results, doc_path.parent)
            drawn += across
        doc_path.write_text(text)
    except (OSError, ValueError, KeyError) as err:
        raise click.ClickException(f"{doc_path}: {err!r}") from err
    console.print(f"{doc_path}: {', '.join(blocks) or 'nothing'} updated")
    for p in drawn:
        console.print(f"picture written to {p.relative_to(root)}")


group.add_command(benchbundle.bundle_cmd)
group.add_command(benchpictures.pictures_cmd)
