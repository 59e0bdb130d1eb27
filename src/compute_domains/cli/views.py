"""``cdctl status [CD]`` and ``cdctl topology``: read-only views of any cluster (``KUBECONFIG``).

The text views fit an 80-column terminal: node names are never cut (their column does not
wrap and is as wide as the longest name), the node IP shows only from 120 columns on (it is
in ``-o json`` always), and the long texts (why a CD is not Ready, the workload pods) wrap.
``live`` is the live display ``cdctl demo`` and its scenario use, right on a pipe too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Node, Pod
from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from compute_domains.api import computedomain, names
from compute_domains.cli import viewmodel
from compute_domains.infra import kube

_KUBECONFIG = click.option(
    "--kubeconfig",
    type=click.Path(path_type=Path),
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig (default: $KUBECONFIG).",
)
_OUTPUT = click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")


@contextlib.contextmanager
def live(console: Console) -> Iterator[Live]:
    """A ``rich`` live display whose last frame ends its line on any console.

    Off a terminal (output piped to a file) rich prints only the last frame, when the display
    stops, and ends the line only on a terminal; the next output would then continue the
    table's bottom border (``└───┘formed in 8.5s``).
    """
    with Live(console=console, refresh_per_second=4) as display:
        yield display
    if not console.is_terminal:
        console.line()


def _client(kubeconfig: Path | None) -> AsyncClient:
    if kubeconfig is None:
        default = Path.home() / ".kube" / "config"
        kubeconfig = default if default.exists() else None
    return kube.client(kube.KubeSettings(kubeconfig=kubeconfig, field_manager="cdctl"))


async def _dicts(client: AsyncClient, res: Any, **kw: Any) -> list[dict[str, Any]]:
    return [o.to_dict() async for o in client.list(res, **kw)]


async def _status(
    kubeconfig: Path | None, namespace: str | None, name: str | None, driver_ns: str
) -> list[dict[str, Any]]:
    client = _client(kubeconfig)
    try:
        cds = await _dicts(client, computedomain.ComputeDomainResource, namespace=namespace or "*")
        if name:
            cds = [c for c in cds if c["metadata"]["name"] == name]
        daemons = await _dicts(
            client, Pod, namespace=driver_ns, labels={names.COMPUTE_DOMAIN_LABEL: None}
        )
        pods = await _dicts(client, Pod, namespace=namespace or "*")
        events = await _dicts(client, Event, namespace=namespace or "*")
    finally:
        await client.close()
    return viewmodel.status_view(cds, daemons, pods, events)


async def _topology(kubeconfig: Path | None) -> dict[str, Any]:
    client = _client(kubeconfig)
    try:
        # Undecoded: lightkube's model objects for 1,152 Nodes took seconds, for a few fields.
        nodes = await kube.list_raw(client, Node)
        try:
            with kube.translated("listing ComputeDomains"):
                cds = await kube.list_raw(
                    client, computedomain.ComputeDomainResource, namespace="*"
                )
        except kube.KubeError as err:
            if not kube.is_not_found(err):
                raise
            cds = []  # no ComputeDomain CRD (the driver is not installed): nothing is held
    finally:
        await client.close()
    return viewmodel.topology_view(nodes, cds)


@click.command("status")
@click.argument("cd", required=False)
@click.option("-n", "--namespace", default=None, help="Namespace of the CDs (default: all).")
@click.option(
    "--driver-namespace",
    default="compute-domains",
    envvar="CD_DRIVER_NAMESPACE",
    show_default=True,
    help="Where the driver's daemon pods run.",
)
@_KUBECONFIG
@_OUTPUT
def status(
    cd: str | None,
    namespace: str | None,
    driver_namespace: str,
    kubeconfig: Path | None,
    output: str,
) -> None:
    """ComputeDomains: status, nodes ready/total, cliques and indices, pods, and why not Ready."""
    view = asyncio.run(_status(kubeconfig, namespace, cd, driver_namespace))
    if output == "json":
        click.echo(json.dumps(view, indent=1))
        return
    console = Console()
    if not view:
        console.print("no ComputeDomains found")
        return
    render_status(view, console)


def render_status(view: list[dict[str, Any]], console: Console) -> None:
    """The text form of ``viewmodel.status_view`` (readable at 80 columns)."""
    wide = console.width >= 120
    for entry in view:
        color = "green" if entry["status"] == "Ready" else "yellow"
        reason = f" ({entry['reason']})" if entry.get("reason") else ""
        console.print(
            f"[bold]{entry['namespace']}/{entry['name']}[/]  [{color}]"
            f"{entry['status']}{reason}[/]  nodes {entry['readyNodes']}/{entry['totalNodes']}"
            f"  template {entry['template']}",
            overflow="fold",
        )
        names = [n["name"] or "" for n in entry["nodes"]]
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("NODE", no_wrap=True, min_width=max(map(len, names), default=4))
        table.add_column("CLIQUE", overflow="ellipsis", max_width=14)
        table.add_column("IDX", justify="right", no_wrap=True)
        if wide:
            table.add_column("IP", no_wrap=True)
        table.add_column("STATUS", no_wrap=True)
        table.add_column("DAEMON", no_wrap=True)
        table.add_column("WORKLOAD", overflow="fold", ratio=1)
        daemons = {d["node"]: d for d in entry["daemonPods"]}
        workloads: dict[str, list[str]] = {}
        for w in entry["workloadPods"]:
            workloads.setdefault(w["node"] or "-", []).append(
                f"{w['name']} ({'ready' if w['ready'] else w['phase']})"
            )
        for n in entry["nodes"]:
            d = daemons.get(n["name"])
            cells = [
                n["name"],
                (n["cliqueID"] or "-")[-12:],
                "-" if n["index"] is None or n["index"] < 0 else str(n["index"]),
                *([n["ipAddress"] or "-"] if wide else []),
                n["status"],
                ("ready" if d["ready"] else "no") if d else "-",
                ", ".join(workloads.get(n["name"], [])) or "-",
            ]
            table.add_row(*cells)
        console.print(table)
        for p in entry.get("pendingPods") or []:
            pod, says = p["name"], p["scheduler"]
            console.print(f"  [yellow]pending:[/] pod {pod}: {says}", overflow="fold")
        for why in entry["reasons"]:
            console.print(f"  [yellow]why:[/] {why}", overflow="fold")


SUMMARY_ABOVE_NODES = 72
"""``cdctl topology`` lists every node up to this many GPU nodes (4 racks), one row per NVLink
domain above it, unless ``--nodes`` or ``--summary`` says otherwise."""


@click.command("topology")
@_KUBECONFIG
@_OUTPUT
@click.option(
    "--nodes/--summary",
    "per_node",
    default=None,
    help=f"Every node, or one row per NVLink domain (default: per node up to "
    f"{SUMMARY_ABOVE_NODES} GPU nodes, the summary above).",
)
def topology(kubeconfig: Path | None, output: str, per_node: bool | None) -> None:
    """NVLink domains (cliques): their nodes and GPUs, which CD holds them, what is free."""
    view = asyncio.run(_topology(kubeconfig))
    if output == "json":
        click.echo(json.dumps(view, indent=1))
        return
    console = Console()
    total = sum(len(d["nodes"]) for d in view["domains"])
    if per_node is False or (per_node is None and total > SUMMARY_ABOVE_NODES):
        render_topology_summary(view, console)
        return
    for dom in view["domains"]:
        title = dom["clique"] or "nodes without multi-node NVLink"
        console.print(
            f"[bold]{title}[/]  {len(dom['nodes'])} nodes, {dom['gpus']} GPUs, "
            f"{dom['free']} free, held by: {', '.join(dom['heldBy']) or 'nobody'}"
        )
        table = Table("NODE", "GPUS", "READY", "HELD BY")
        for n in dom["nodes"]:
            table.add_row(
                n["name"],
                str(n["gpus"]),
                "yes" if n["ready"] else "NO",
                n["heldBy"] or "[green]free[/]",
            )
        console.print(table)


def _natural(name: str) -> tuple[object, ...]:
    """``gb200-r2-n00`` before ``gb200-r10-n00``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def render_topology_summary(view: dict[str, Any], console: Console) -> None:
    """One row per NVLink domain (in node-name order): its nodes' range, how many are ready
    and free, its GPUs and which CDs hold it; a line of totals first."""
    domains = view["domains"]
    nodes = [n for d in domains for n in d["nodes"]]
    holders = sorted({h for d in domains for h in d["heldBy"]})
    console.print(
        f"[bold]{len(domains)} NVLink domains[/], {len(nodes)} GPU nodes "
        f"({sum(n['ready'] for n in nodes)} ready, {sum(d['free'] for d in domains)} free), "
        f"{sum(d['gpus'] for d in domains)} GPUs; held by: {', '.join(holders) or 'nobody'}",
        overflow="fold",
    )
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("NODES", no_wrap=True)
    table.add_column("CLIQUE", overflow="ellipsis", max_width=14, no_wrap=True)
    table.add_column("READY", justify="right", no_wrap=True)
    table.add_column("GPUS", justify="right", no_wrap=True)
    table.add_column("FREE", justify="right", no_wrap=True)
    table.add_column("HELD BY", overflow="fold", ratio=1)
    rows = []
    for dom in domains:
        names_ = sorted((str(n["name"]) for n in dom["nodes"]), key=_natural)
        span = names_[0] if len(names_) == 1 else f"{names_[0]}..{names_[-1]}"
        rows.append((_natural(names_[0]), dom, span))
    for _, dom, span in sorted(rows, key=lambda r: r[0]):
        ready = sum(n["ready"] for n in dom["nodes"])
        table.add_row(
            span,
            (dom["clique"] or "-")[-12:],
            f"{ready}/{len(dom['nodes'])}",
            str(dom["gpus"]),
            str(dom["free"]),
            ", ".join(dom["heldBy"]) or "-",
        )
    console.print(table)
