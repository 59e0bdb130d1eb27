"""``cdctl demo``: the README's first command, end to end on a fresh machine.

Builds the pinned tools, starts the default simulated cluster (2 racks x 18 nodes x 4 GPUs)
with the driver installed by its Helm chart, applies the seed's ``compute-domain-0`` example
unchanged, shows the domain forming live (pods scheduled, daemons up, IMEX domain ready,
channels injected), prints a per-node summary with the formation time and the commands to
explore it, and tears everything down unless ``--keep``.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import click
from lightkube.resources.core_v1 import Pod
from rich.console import Console
from rich.table import Table

from compute_domains.api import computedomain, names
from compute_domains.bench import scenario as scenario_mod
from compute_domains.cli import options, simoptions, tools, viewmodel, views
from compute_domains.cli import scenario as scenario_cli
from compute_domains.infra import kube
from compute_domains.sim import driver, lifecycle, state, topology

_EXAMPLE = "examples/compute-domain-0.yaml"


def _kubectl(bins: Path, kubeconfig: Path, *args: str, check: bool = True) -> str:
    res = subprocess.run(
        [str(bins / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check and res.returncode != 0:
        raise click.ClickException(f"kubectl {' '.join(args)} failed: {res.stderr.strip()}")
    return (res.stdout + res.stderr).rstrip()


async def _snapshot(kubeconfig: Path) -> dict[str, Any]:
    client = kube.client(kube.KubeSettings(kubeconfig=kubeconfig, field_manager="cdctl"))
    try:
        pods = [
            p.to_dict() async for p in client.list(Pod, namespace="default", labels={"job": "ex1"})
        ]
        daemons = [
            p.to_dict()
            async for p in client.list(
                Pod, namespace=driver.NAMESPACE, labels={names.COMPUTE_DOMAIN_LABEL: None}
            )
        ]
        cds: list[dict[str, Any]] = [
            c.to_dict()  # type: ignore[no-untyped-call]
            async for c in client.list(computedomain.ComputeDomainResource, namespace="default")
        ]
    finally:
        await client.close()
    ready = [p for p in pods if viewmodel._ready(p)]
    return {
        "scheduled": sum(1 for p in pods if (p.get("spec") or {}).get("nodeName")),
        "workloads": len(pods),
        "running": len(ready),
        "daemons": len(daemons),
        "daemons_ready": sum(1 for p in daemons if viewmodel._ready(p)),
        "cd": (cds[0].get("status") or {}) if cds else {},
        "view": viewmodel.status_view(cds, daemons, pods, []),
    }


def _progress_table(snap: dict[str, Any], elapsed: float) -> Table:
    cd = snap["cd"]
    nodes = cd.get("nodes") or []
    table = Table(title=f"compute-domain-0 forming ({elapsed:5.1f}s)", show_header=False)
    table.add_row("workload pods scheduled", f"{snap['scheduled']}/18")
    table.add_row("IMEX daemons ready", f"{snap['daemons_ready']}/{snap['daemons']}")
    table.add_row(
        "ComputeDomain nodes ready",
        f"{sum(1 for n in nodes if n.get('status') == 'Ready')}/{len(nodes)}",
    )
    table.add_row("ComputeDomain status", cd.get("status") or "-")
    table.add_row("workload pods running with their channel", f"{snap['running']}/18")
    return table


def _formed(snap: dict[str, Any]) -> bool:
    return bool(snap["running"] == 18 and snap["cd"].get("status") == "Ready")


@click.command("demo")
@click.option("--name", default="demo", show_default=True, help="Name of the demo's sim.")
@click.option("--keep", is_flag=True, help="Leave the cluster running at the end.")
@click.option("--timeout", default=600, show_default=True, help="Seconds to wait for formation.")
@click.option(
    "--racks",
    default=2,
    show_default=True,
    help="Racks of 18 GB200 nodes (2 is the seeds' A4X shape).",
)
@simoptions.NODES_MODE
@click.option(
    "--scenario",
    "scenario_name",
    type=click.Choice(["seed-example", "two-domain-64plus8"]),
    default="seed-example",
    show_default=True,
    help="seed-example: the seed's compute-domain-0; two-domain-64plus8: the deployment guide's "
    "two racks of 16 training + 2 spare nodes, a node failure and its replacement (virtual "
    "nodes unless --nodes-mode is given).",
)
@click.option(
    "--no-warm",
    is_flag=True,
    help="two-domain-64plus8 without the warm-nodes annotation: daemons start only where a "
    "channel claim is prepared (NVIDIA's behaviour).",
)
@click.option(
    "--record", is_flag=True, help="two-domain-64plus8: write the times to bench/results/."
)
def demo(
    name: str,
    keep: bool,
    timeout: int,
    racks: int,
    nodes_mode: str,
    scenario_name: str,
    no_warm: bool,
    record: bool,
) -> None:
    """Run the seed's compute-domain-0 example on a simulated 2-rack GB200 cluster (or, with
    --scenario two-domain-64plus8, the deployment guide's 64+8 failure scenario)."""
    if scenario_name == "two-domain-64plus8":
        ctx = click.get_current_context()
        explicit = ctx.get_parameter_source("nodes_mode") != click.core.ParameterSource.DEFAULT
        _two_domain(name, keep, timeout, nodes_mode if explicit else "virtual", no_warm, record)
        return
    console = Console()
    t0 = time.monotonic()
    console.rule("[bold]1. upstream tools (built once, then cached)")
    toolset = tools.build_tools(console)
    paths = state.SimPaths(options.sim_home(), name)
    console.rule(f"[bold]2. simulated cluster: {racks} rack(s) x 18 GB200 nodes x 4 GPUs + driver")
    t1 = time.monotonic()
    with console.status(f"control plane, {18 * racks} simulated nodes, then `helm install`"):
        # Upstream's node timings: on a loaded 2-core machine a heartbeat may come late, and
        # an 8 s NotReady + 10 s eviction would reschedule workloads mid-demo.
        lifecycle.start(
            paths,
            toolset.bin_dir,
            shape=topology.Shape(racks=racks),
            chart=options.chart_dir(),
            patience=True,
            nodes_mode=nodes_mode,
        )
    console.print(f"cluster and driver up in {time.monotonic() - t1:.1f}s")
    kc, bins = paths.kubeconfig, toolset.bin_dir
    try:
        console.rule("[bold]3. the seed's example, unchanged")
        console.print(_kubectl(bins, kc, "apply", "-f", str(options.repo_root() / _EXAMPLE)))
        t2 = time.monotonic()
        snap: dict[str, Any] = {}
        with views.live(console) as live:
            while time.monotonic() - t2 < timeout:
                snap = asyncio.run(_snapshot(kc))
                live.update(_progress_table(snap, time.monotonic() - t2))
                if _formed(snap):
                    break
                time.sleep(0.5)  # display refresh only
        formed_s = time.monotonic() - t2
        if not _formed(snap):
            console.print(f"[red]not formed after {timeout}s; see `cdctl status`")
            raise SystemExit(1)
        console.rule(f"[bold green]4. formed in {formed_s:.1f}s")
        _summary(console, snap)
        console.print("explore it:")
        console.print(f'  eval "$(cdctl sim env --name {name})"')
        console.print("  kubectl get computedomains; cdctl status; cdctl topology")
        console.print("  kubectl logs deploy/example-mnnvl-workload")
    finally:
        if keep:
            console.print(f"kept running; stop it with: cdctl sim down --name {name}")
        else:
            console.rule("[bold]5. teardown")
            _kubectl(
                bins,
                kc,
                "delete",
                "-f",
                str(options.repo_root() / _EXAMPLE),
                "--wait=true",
                check=False,
            )
            lifecycle.stop(paths)
            console.print(f"sim '{name}' stopped and removed")
    console.print(f"[bold green]demo finished in {time.monotonic() - t0:.1f}s")


def _summary(console: Console, snap: dict[str, Any]) -> None:
    view = snap["view"][0]
    workloads = {w["node"]: w for w in view["workloadPods"]}
    daemons = {d["node"]: d for d in view["daemonPods"]}
    table = Table("NODE", "RACK/CLIQUE", "INDEX", "DAEMON", "WORKLOAD")
    for n in view["nodes"]:
        rack = n["name"].split("-")[1] if n["name"].startswith("gb200-") else "-"
        w, d = workloads.get(n["name"]), daemons.get(n["name"])
        table.add_row(
            n["name"],
            f"{rack} / ...{(n['cliqueID'] or '')[-10:]}",
            str(n["index"]),
            "ready" if d and d["ready"] else "not ready",
            f"{w['name']} running" if w and w["ready"] else "-",
        )
    console.print(table)


def _two_domain(
    name: str, keep: bool, timeout: int, nodes_mode: str, no_warm: bool, record: bool
) -> None:
    console = Console()
    t0 = time.monotonic()
    toolset = tools.build_tools(console)
    paths = state.SimPaths(options.sim_home(), name)
    console.rule(f"[bold]simulated cluster: 2 racks x 18 GB200 nodes ({nodes_mode} nodes) + driver")
    with console.status("control plane, 36 simulated nodes, then `helm install`"):
        # The sim's fast node timings (NotReady after 8 s, eviction 10 s later): the failure
        # timeline is what this scenario measures.
        lifecycle.start(
            paths,
            toolset.bin_dir,
            shape=topology.Shape(racks=2),
            chart=options.chart_dir(),
            nodes_mode=nodes_mode,
            dranet=True,  # the guide's §15.6 pods claim DRANET's RDMA NICs
        )
    console.print(f"cluster and driver up in {time.monotonic() - t0:.1f}s")
    mode = "without warm spares (NVIDIA's behaviour)" if no_warm else "with warm spares"
    console.rule(f"[bold]{scenario_mod.MANIFEST} {mode}")
    try:
        asyncio.run(
            scenario_cli.run(console, paths, warm=not no_warm, timeout=timeout, record=record)
        )
    finally:
        if keep:
            console.print(f"kept running; stop it with: cdctl sim down --name {name}")
        else:
            lifecycle.stop(paths)
            console.print(f"sim '{name}' stopped and removed")
    console.print(f"[bold green]demo finished in {time.monotonic() - t0:.1f}s")
