"""``cdctl status [CD]`` and ``cdctl topology``: read-only views of any cluster (``KUBECONFIG``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Node, Pod
from rich.console import Console
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
        nodes = await _dicts(client, Node)
        cds = await _dicts(client, computedomain.ComputeDomainResource, namespace="*")
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
    for entry in view:
        color = "green" if entry["status"] == "Ready" else "yellow"
        console.print(
            f"[bold]{entry['namespace']}/{entry['name']}[/]  [{color}]"
            f"{entry['status']}[/]  nodes {entry['readyNodes']}/{entry['totalNodes']}"
            f"  template {entry['template']}"
        )
        table = Table("NODE", "CLIQUE", "INDEX", "IP", "STATUS", "DAEMON", "WORKLOAD")
        daemons = {d["node"]: d for d in entry["daemonPods"]}
        workloads: dict[str, list[str]] = {}
        for w in entry["workloadPods"]:
            workloads.setdefault(w["node"] or "-", []).append(
                f"{w['name']} ({'ready' if w['ready'] else w['phase']})"
            )
        for n in entry["nodes"]:
            d = daemons.get(n["name"])
            table.add_row(
                n["name"],
                (n["cliqueID"] or "-")[-12:],
                str(n["index"]),
                n["ipAddress"] or "-",
                n["status"],
                ("ready" if d["ready"] else "not ready") if d else "-",
                ", ".join(workloads.get(n["name"], [])) or "-",
            )
        console.print(table)
        for reason in entry["reasons"]:
            console.print(f"  [yellow]why:[/] {reason}")


@click.command("topology")
@_KUBECONFIG
@_OUTPUT
def topology(kubeconfig: Path | None, output: str) -> None:
    """NVLink domains (cliques): their nodes and GPUs, which CD holds them, what is free."""
    view = asyncio.run(_topology(kubeconfig))
    if output == "json":
        click.echo(json.dumps(view, indent=1))
        return
    console = Console()
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
