"""``cdctl sim up|down|env|status``: the local simulated cluster (and its hidden ``serve``).

The option groups these share are ``simoptions``; ``cdctl sim node ...`` is ``simnode``,
``cdctl sim control-plane ...`` (fault drills on the control plane) ``simcontrol``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

import click
from rich.console import Console

from compute_domains.cli import (
    inprocess,
    options,
    serving,
    simcontrol,
    simnode,
    simoptions,
    tools,
)
from compute_domains.containers import procs
from compute_domains.sim import cluster, errors, gcpolicy, hosts, lifecycle, limits, progress, state
from compute_domains.sim import driver as driver_mod


@click.group("sim")
def group() -> None:
    """The local simulated GB200 cluster (real control plane, simulated nodes)."""


@group.command("up")
@simoptions.NAME
@click.option("--api-port", type=int, default=None, help="Fixed API server port (default: free).")
@click.option(
    "--driver/--no-driver",
    default=True,
    show_default=True,
    help="Install the project's Helm chart once the nodes are up.",
)
@click.option(
    "--dranet/--no-dranet",
    default=True,
    show_default=True,
    help="Run DRANET's stand-in: the dra.net DRA driver with each GPU node's four RDMA NICs "
    "(the deployment guide's section 3.3); --no-dranet leaves it out (the guide's path B).",
)
@click.option(
    "--node-timings",
    type=click.Choice(["auto", "fast", "upstream"]),
    default="auto",
    show_default=True,
    help="Node-lifecycle timings: fast (NotReady after 8 s without a heartbeat, eviction "
    "after 10 s; Leases renewed every 2 s) for fault drills, upstream (40 s, 300 s; every "
    "10 s) for large or long runs; auto: upstream above "
    f"{lifecycle.PATIENT_ABOVE_NODES} nodes.",
)
@simoptions.IMAGE_MAP
@simoptions.NODES_MODE
@simoptions.RACKS_PER_HOST
@simoptions.shape_options
def up(
    name: str,
    api_port: int | None,
    driver: bool,
    dranet: bool,
    node_timings: str,
    image_map: tuple[str, ...],
    nodes_mode: str,
    racks_per_host: int | None,
    racks: int,
    nodes_per_rack: int,
    gpus_per_node: int,
    plain_nodes: int,
    fabric: tuple[str, ...],
) -> None:
    """Build the tools if needed, start the sim and print how to use it."""
    console = Console(stderr=True)
    shape = simoptions.shape(racks, nodes_per_rack, gpus_per_node, plain_nodes, fabric)
    toolset = tools.build_tools(console)
    paths = simoptions.paths(name)
    patience = node_timings == "upstream" or (
        node_timings == "auto" and lifecycle.patient_by_default(shape)
    )
    t0 = time.monotonic()
    what = (
        f"starting sim '{name}': control plane, then {shape.total_nodes} "
        f"simulated nodes ({racks} racks x {nodes_per_rack} nodes x "
        f"{gpus_per_node} GPUs{', upstream node timings' if patience else ''})"
    )
    with console.status(what + "...") as spinner:

        def on_wait(line: str) -> None:
            spinner.update(f"{what}: {line} ({time.monotonic() - t0:.0f}s)")

        chart = options.chart_dir() if driver and shape.total_nodes else None
        started = lifecycle.start(
            paths,
            toolset.bin_dir,
            api_port=api_port,
            shape=shape,
            chart=chart,
            image_map=simoptions.image_map(image_map),
            nodes_mode=nodes_mode,
            racks_per_host=racks_per_host,
            patience=patience,
            on_wait=on_wait,
            dranet=dranet,
        )
    if started.cleaned_stale:
        console.print(f"[yellow]removed the stale folder of sim '{name}' left by a killed run")
    if started.already_running:
        console.print(f"sim '{name}' is already running; not starting it twice")
    else:
        console.print(
            f"sim '{name}' is up in {time.monotonic() - t0:.1f}s ({shape.total_nodes} nodes)"
        )
    _print_usage(paths, toolset.bin_dir)


def _print_usage(paths: state.SimPaths, bin_dir: Path) -> None:
    endpoints = paths.endpoints()
    api = endpoints.api_server if endpoints else "?"
    click.echo(f"API server:  {api}")
    click.echo(f"kubeconfig:  {paths.kubeconfig}")
    click.echo("use it with:")
    click.echo(f'  eval "$(cdctl sim env --name {paths.name})"')
    click.echo("  kubectl get nodes")
    click.echo("  kubectl get --raw /apis/resource.k8s.io/v1")
    click.echo(f"or directly: {bin_dir}/kubectl --kubeconfig {paths.kubeconfig} get ns")


@group.command("down")
@simoptions.NAME
def down(name: str) -> None:
    """Stop the sim and remove its folder (no process or port is left behind)."""
    paths = simoptions.paths(name)
    if lifecycle.stop(paths):
        click.echo(f"sim '{name}' stopped and removed")
    else:
        click.echo(f"no sim named '{name}' is running; nothing to stop")


@group.command("env")
@simoptions.NAME
def env(name: str) -> None:
    """Print shell exports for KUBECONFIG and the PATH with the built kubectl and helm."""
    paths = simoptions.paths(name)
    recorded = state.read_state(paths)
    if recorded is None or not state.supervisor_alive(paths, recorded):
        raise errors.SimError(f"no sim named '{name}' is running: start it with `cdctl sim up`")
    click.echo(f"export KUBECONFIG={paths.kubeconfig}")
    click.echo(f"export PATH={recorded.bin_dir}:$PATH")


@group.command("status")
@simoptions.NAME
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def status(name: str, output: str) -> None:
    """Show whether the sim runs, its phase, endpoints and component processes."""
    paths = simoptions.paths(name)
    recorded = state.read_state(paths)
    alive = recorded is not None and state.supervisor_alive(paths, recorded)
    endpoints = paths.endpoints()
    doc = {
        "name": name,
        "running": alive,
        "phase": recorded.phase if recorded else "absent",
        "stale": recorded is not None and not alive,
        "apiServer": endpoints.api_server if endpoints else None,
        "kubeconfig": str(paths.kubeconfig) if endpoints else None,
        "components": {
            n: procs.pid_alive(int(p))
            for n, p in [*endpoints.pids.items(), *recorded.extra.get("nodeHosts", {}).items()]
        }
        if endpoints and alive and recorded
        else {},
        "paused": sorted(n for n, p in endpoints.pids.items() if procs.stopped(int(p)))
        if endpoints and alive
        else [],
        "error": recorded.error if recorded else "",
        "progress": recorded.extra.get("progress", "")
        if recorded and alive and recorded.phase == "starting"
        else "",
    }
    if output == "json":
        click.echo(json.dumps(doc, indent=1))
        return
    if recorded is None:
        click.echo(f"sim '{name}': not running")
        return
    state_word = doc["phase"] if alive else "stale (its supervisor is gone; `cdctl sim down`)"
    click.echo(f"sim '{name}': {state_word}")
    if doc["progress"]:
        click.echo(f"  progress    {doc['progress']}")
    if endpoints:
        click.echo(f"  API server  {endpoints.api_server}")
        click.echo(f"  kubeconfig  {paths.kubeconfig}")
    components = doc["components"]
    assert isinstance(components, dict)
    paused = doc["paused"]
    assert isinstance(paused, list)
    for comp, up_ in components.items():
        word = "paused (SIGSTOP)" if comp in paused else "running" if up_ else "DOWN"
        click.echo(f"  {comp:<24} {word}")
    if doc["error"]:
        click.echo(f"  error: {doc['error']}")


@group.command("serve", hidden=True)
@click.option("--home", type=click.Path(path_type=Path), required=True)
@click.option("--name", required=True)
@click.option("--bin-dir", type=click.Path(path_type=Path), required=True)
@click.option("--api-port", type=int, default=None)
@click.option("--die-with-parent", is_flag=True, help="End when the starting process ends.")
@click.option("--chart", type=click.Path(path_type=Path), default=None)
@click.option("--dranet", is_flag=True, help="Run DRANET's stand-in on the nodes.")
@click.option(
    "--patient-nodes",
    is_flag=True,
    help="Upstream's node-lifecycle timings (40 s to NotReady, 300 s to eviction).",
)
@simoptions.IMAGE_MAP
@simoptions.NODES_MODE
@simoptions.RACKS_PER_HOST
@click.option(
    "--own-watches",
    is_flag=True,
    help="Virtual nodes: every in-process component opens its own watches instead of its "
    "node host's shared caches (a measurement's baseline).",
)
@simoptions.shape_options
def serve(
    home: Path,
    name: str,
    bin_dir: Path,
    api_port: int | None,
    die_with_parent: bool,
    chart: Path | None,
    dranet: bool,
    patient_nodes: bool,
    image_map: tuple[str, ...],
    nodes_mode: str,
    racks_per_host: int | None,
    own_watches: bool,
    racks: int,
    nodes_per_rack: int,
    gpus_per_node: int,
    plain_nodes: int,
    fabric: tuple[str, ...],
) -> None:
    """Run the sim supervisor in the foreground (started by `up` and test fixtures)."""
    from compute_domains.infra import logs

    logs.setup("info")
    if die_with_parent:
        procs.die_with_parent()
    isolate = os.geteuid() == 0
    if not isolate:
        logging.getLogger(__name__).warning(
            "not running as root: containers share the host's filesystem view (no private "
            "mount namespace, no CDI device nodes, /etc/hosts not private)"
        )
    shape = simoptions.shape(racks, nodes_per_rack, gpus_per_node, plain_nodes, fabric)
    nodes = shape.total_nodes
    settings = cluster.SimSettings(
        home=home,
        name=name,
        bin_dir=bin_dir,
        api_port=api_port,
        isolate=isolate,
        shape=shape,
        driver=driver_mod.DriverSettings(chart=chart, timeout_s=progress.helm_timeout_s(nodes))
        if chart is not None
        else None,
        patience=patient_nodes,
        dranet=dranet,
        image_map=simoptions.image_map(image_map),
        nodes_mode="virtual" if nodes_mode == "virtual" else "process",
        programs=inprocess.programs(Path(sys.executable).parent)
        if nodes_mode == "virtual"
        else None,
        shared_informers=not own_watches,
    )
    if racks_per_host is not None:
        settings = dataclasses.replace(settings, racks_per_host=racks_per_host)
    rc = asyncio.run(cluster.serve(settings))
    sys.exit(rc)  # not click's Exit, whose code ``standalone_mode=False`` drops


@group.command("node-host", hidden=True)
@click.option("--plan", type=click.Path(path_type=Path, exists=True), required=True)
@click.option("--socket", "sock", type=click.Path(path_type=Path), required=True)
@click.option("--index", type=int, required=True)
def node_host(plan: Path, sock: Path, index: int) -> None:
    """Run one node host of a virtual-node sim (started by its supervisor, ``sim.hosts``)."""
    from compute_domains.infra import logs

    logs.setup("info")
    settings = hosts.settings_from_plan(
        plan.read_text(), inprocess.programs(Path(sys.executable).parent)
    )
    assert settings.nodes is not None
    limits.raise_open_files(len(settings.nodes))
    logging.getLogger(__name__).info("node host %d: %d nodes", index, len(settings.nodes))
    # After the imports and the plan: what exists now is never garbage (sim.gcpolicy).
    run = hosts.serve_host(settings, sock, sys.stdout, gcpolicy.install())
    asyncio.run(serving.serve(run, f"node-host-{index}", hosts.STOP_GRACE_S - 5))


group.add_command(simnode.group)
group.add_command(simcontrol.group)
