"""The driver options of ``cdctl bench formation`` and the fresh sim each of its rounds gets.

Kept apart from ``cli/bench.py`` (the commands); here because the simulator may be driven
only from ``cli``. ``fresh_sim`` starts a sim without any driver for one round and stops it
afterwards; ``run_round`` runs one ``bench.rounds`` round in it; ``driver_options`` declares
the options ``bench.drivers`` parses (its docstring has the grammar); ``ours`` is the
project's chart as the sim installs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import click

from compute_domains.bench import drivers, placement, roundresults, rounds, settle
from compute_domains.cli import options
from compute_domains.sim import componentmetrics, driverroot, errors, lifecycle, state, topology
from compute_domains.sim import driver as driver_mod

_OPTIONS = (
    click.option(
        "--driver",
        "driver_args",
        multiple=True,
        metavar="ours|NAME=CHART",
        help="A driver to measure (default: ours, this project's chart); another one is a "
        "chart folder installed with helm under NAME. Repeatable: drivers then run "
        "alternately, each round in a fresh sim.",
    ),
    click.option(
        "--set",
        "set_args",
        multiple=True,
        metavar="DRIVER:KEY=VALUE",
        help="A helm --set value for one driver's chart; repeatable.",
    ),
    click.option(
        "--namespace",
        "namespace_args",
        multiple=True,
        metavar="DRIVER:NAMESPACE",
        help="A driver's release namespace (default: its release name; ours: compute-domains).",
    ),
    click.option(
        "--release",
        "release_args",
        multiple=True,
        metavar="DRIVER:RELEASE",
        help="A driver's helm release name (default: its chart folder's name).",
    ),
    click.option(
        "--image-map",
        "image_map_args",
        multiple=True,
        metavar="[DRIVER:]REPOSITORY=FOLDER",
        help="Run containers of image REPOSITORY from FOLDER in that driver's sims (without "
        "DRIVER: in every sim); repeatable.",
    ),
)


def driver_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Add the five driver options; the command passes their values to ``specs``."""
    for opt in reversed(_OPTIONS):
        f = opt(f)
    return f


def ours(namespace: str) -> drivers.DriverSpec:
    """The project's chart as the sim installs it (its one value: the nodes' driver root)."""
    return drivers.DriverSpec(
        name=drivers.OURS,
        chart=options.chart_dir(),
        release=driver_mod.RELEASE,
        namespace=namespace,
        values=(f"nvidiaDriverRoot={driverroot.DRIVER_ROOT}",),
    )


def specs(
    *,
    driver_args: tuple[str, ...],
    set_args: tuple[str, ...],
    namespace_args: tuple[str, ...],
    release_args: tuple[str, ...],
    image_map_args: tuple[str, ...],
    ours_namespace: str,
) -> tuple[drivers.DriverSpec, ...]:
    """The drivers the options name; a malformed option is a usage error naming it."""
    try:
        return drivers.parse(
            drivers=driver_args,
            sets=set_args,
            namespaces=namespace_args,
            releases=release_args,
            image_maps=image_map_args,
            ours=ours(ours_namespace),
        )
    except drivers.DriverOptionError as err:
        raise click.BadParameter(str(err), param_hint=err.option) from err


def _scheduler_page(paths: state.SimPaths) -> Callable[[], Awaitable[str]]:
    """Reads the sim's kube-scheduler ``/metrics`` page; "" (the run records no scheduler
    counts) when the page cannot be read: a missing figure must not end a measured run."""

    def read() -> str:
        endpoints = paths.endpoints()
        if endpoints is None:
            return ""
        try:
            return componentmetrics.read(endpoints, "kube-scheduler")
        except (errors.SimError, OSError, KeyError, ValueError) as err:
            click.echo(f"kube-scheduler's counters not read: {err}", err=True)
            return ""

    async def page() -> str:
        return await asyncio.to_thread(read)

    return page


@contextlib.contextmanager
def fresh_sim(
    name: str,
    bin_dir: Path,
    racks: int,
    spec: drivers.DriverSpec,
    keep: bool,
    nodes_mode: str = "process",
    shared_informers: bool = True,
) -> Iterator[rounds.SimHandle]:
    """A new sim without any driver for one round (the round installs it); stopped afterwards."""
    paths = state.SimPaths(options.sim_home(), name)
    recorded = state.read_state(paths)
    if recorded is not None and state.supervisor_alive(paths, recorded):
        # Its driver and its history are unknown: measuring in it would compare unlike things.
        raise click.ClickException(
            f"sim '{name}' is already running; each round needs a fresh one: stop it "
            f"(`cdctl sim down --name {name}`) or give another --name"
        )
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    started = lifecycle.start(
        paths,
        bin_dir,
        shape=topology.Shape(racks=racks),
        patience=True,
        image_map=spec.image_map,
        nodes_mode=nodes_mode,
        shared_informers=shared_informers,
    )
    try:
        recorded = state.read_state(paths)
        assert recorded is not None
        yield rounds.SimHandle(
            kubeconfig=paths.kubeconfig,
            bin_dir=bin_dir,
            root_pid=recorded.supervisor_pid,
            up_s=time.monotonic() - t0,
            load_before=load,
            control_socket=paths.root / "control.sock",
            scheduler_metrics=_scheduler_page(paths),
        )
    finally:
        if not keep:
            lifecycle.stop(paths, process=started.process)


def run_round(
    rnd: drivers.Round,
    *,
    name: str,
    bin_dir: Path,
    racks: int,
    sizes: list[int],
    keep: bool,
    say: rounds.Say,
    nodes_mode: str = "process",
    pods_per_node: int = 1,
    shared_informers: bool = True,
    workload: placement.Workload = placement.Workload.CLAIMS,
    settling: settle.SettleSettings | None = None,
) -> roundresults.RoundResult:
    """One round in its own sim; a sim that does not start fails this round, not the rest."""
    load = os.getloadavg()[0]
    try:
        with fresh_sim(name, bin_dir, racks, rnd.driver, keep, nodes_mode, shared_informers) as sim:
            return asyncio.run(
                rounds.run_round(rnd, sim, sizes, say, pods_per_node, workload, settling)
            )
    except errors.SimError as err:
        say(f"round {rnd.index + 1} ({rnd.driver.name}): the sim did not start: {err}")
        failed = roundresults.RoundResult(
            index=rnd.index,
            repeat=rnd.repeat,
            driver=rnd.driver.name,
            sim_up_s=0.0,
            load_before_sim=load,
            load_end=os.getloadavg()[0],
        )
        failed.failures.append(f"round {rnd.index + 1} ({rnd.driver.name}): sim: {err}")
        return failed
