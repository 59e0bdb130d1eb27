"""``cdctl demo``: the README's first command, end to end on a fresh machine.

Today it builds the pinned tools, starts a simulated cluster, shows what the real control plane
serves (its nodes, the DRA API of Kubernetes 1.34) and stops the cluster again unless
``--keep`` is given. Later stages (simulated GB200 nodes, the driver, the seed ComputeDomain)
extend this same command.
"""

from __future__ import annotations

import subprocess
import time

import click
from rich.console import Console

from compute_domains.cli import options, tools
from compute_domains.sim import lifecycle, state


def _kubectl(bin_dir: str, kubeconfig: str, *args: str) -> str:
    res = subprocess.run(
        [f"{bin_dir}/kubectl", "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (res.stdout + res.stderr).rstrip()


@click.command("demo")
@click.option("--name", default="demo", show_default=True, help="Name of the demo's sim.")
@click.option("--keep", is_flag=True, help="Leave the cluster running at the end.")
def demo(name: str, keep: bool) -> None:
    """Build the tools, start a simulated cluster, show it, and stop it."""
    console = Console()
    t0 = time.monotonic()
    console.rule("[bold]1. upstream tools (built once, then cached)")
    toolset = tools.build_tools(console)
    paths = state.SimPaths(options.sim_home(), name)
    console.rule(
        "[bold]2. simulated cluster: real etcd, kube-apiserver, scheduler, controller-manager"
    )
    t1 = time.monotonic()
    with console.status("starting the control plane..."):
        started = lifecycle.start(paths, toolset.bin_dir)
    console.print(
        f"control plane {'was already' if started.already_running else 'is'} up "
        f"({time.monotonic() - t1:.1f}s); kubeconfig {paths.kubeconfig}"
    )
    try:
        kc, bins = str(paths.kubeconfig), str(toolset.bin_dir)
        console.rule("[bold]3. what it serves")
        for title, args in (
            ("kubectl version", ("version",)),
            ("kubectl get nodes", ("get", "nodes", "-o", "wide")),
            (
                "kubectl api-resources --api-group=resource.k8s.io",
                ("api-resources", "--api-group=resource.k8s.io"),
            ),
            ("kubectl get --raw /readyz?verbose (last lines)", ("get", "--raw", "/readyz?verbose")),
        ):
            out = _kubectl(bins, kc, *args)
            if "readyz" in title:
                out = "\n".join(out.splitlines()[-3:])
            console.print(f"[cyan]$ {title}")
            console.print(out, markup=False, highlight=False)
    finally:
        if keep:
            console.rule("[bold]kept running")
            console.print(f'eval "$(cdctl sim env --name {name})"; kubectl get ns')
            console.print(f"stop it with: cdctl sim down --name {name}")
        else:
            console.rule("[bold]4. stopping")
            lifecycle.stop(paths)
            console.print(f"sim '{name}' stopped and removed")
    console.print(f"[bold green]demo finished in {time.monotonic() - t0:.1f}s")
