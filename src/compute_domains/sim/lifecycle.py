"""Start, stop and inspect sims from another process (the CLI, test fixtures).

``start`` launches the supervisor (``cdctl sim serve``) as its own process and waits until its
record says ``ready`` (or ``failed``, whose reason becomes the error). ``stop`` sends SIGTERM,
waits, and falls back to SIGKILL; the supervisor's children die with it, and what its simulated
containers started is ended from their records on the nodes. A folder whose supervisor is gone
is *stale*: ``start`` removes it (killing any recorded component or container process that
somehow survived) and says so.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from compute_domains.containers import procs, runtime
from compute_domains.sim import errors, progress, state, topology


@dataclasses.dataclass(frozen=True, slots=True)
class Started:
    """Result of ``start``: the sim's paths and whether it was already running."""

    paths: state.SimPaths
    already_running: bool
    cleaned_stale: bool
    process: subprocess.Popen[bytes] | None = None
    """The supervisor when this call started it; the caller reaps it after ``stop``."""


PATIENT_ABOVE_NODES = 72
"""``cdctl sim up`` picks upstream's node-lifecycle timings (``cluster.SimSettings.patience``)
for shapes of more nodes than this: the fast timings' 2 s Lease renewals of 1,152 nodes would be
576 writes a second, and a heartbeat late by 8 s on a loaded machine a NotReady node."""


def patient_by_default(shape: topology.Shape) -> bool:
    """Whether ``cdctl sim up`` uses upstream's node timings for ``shape`` unless told."""
    return shape.total_nodes > PATIENT_ABOVE_NODES


def _supervisor_argv(
    paths: state.SimPaths,
    bin_dir: Path,
    api_port: int | None,
    die_with_parent: bool,
    shape: topology.Shape,
    chart: Path | None,
    patience: bool = False,
    image_map: tuple[tuple[str, Path], ...] = (),
    nodes_mode: str = "process",
    racks_per_host: int | None = None,
    shared_informers: bool = True,
    dranet: bool = False,
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "compute_domains",
        "sim",
        "serve",
        "--home",
        str(paths.home),
        "--name",
        paths.name,
        "--bin-dir",
        str(bin_dir),
        "--racks",
        str(shape.racks),
        "--nodes-per-rack",
        str(shape.nodes_per_rack),
        "--gpus-per-node",
        str(shape.gpus_per_node),
        "--plain-nodes",
        str(shape.plain_nodes),
    ]
    for node, fabric in shape.fabric_faults:
        argv += ["--fabric", f"{node}={fabric}"]
    if chart is not None:
        argv += ["--chart", str(chart)]
    if api_port is not None:
        argv += ["--api-port", str(api_port)]
    if die_with_parent:
        argv.append("--die-with-parent")
    if dranet:
        argv.append("--dranet")
    if patience:
        argv.append("--patient-nodes")
    for repo, folder in image_map:
        argv += ["--image-map", f"{repo}={folder}"]
    if nodes_mode != "process":
        argv += ["--nodes-mode", nodes_mode]
    if racks_per_host is not None:
        argv += ["--racks-per-host", str(racks_per_host)]
    if not shared_informers:
        argv.append("--own-watches")
    return argv


def _kill_recorded_children(paths: state.SimPaths) -> None:
    # What the simulated containers started outlives a supervisor that was killed before it
    # stopped its nodes: end every process of every container still recorded on a node.
    nodes = paths.root / "nodes"
    if nodes.is_symlink() and nodes.resolve().is_dir():
        for node_root in nodes.resolve().iterdir():
            runtime.kill_leftovers(node_root / "containers")
    endpoints = paths.endpoints()
    if endpoints is None:
        return
    for pid in endpoints.pids.values():
        # Only a process whose command line names this sim's folder is ours to end.
        if procs.pid_alive(pid) and any(str(paths.root) in a for a in procs.pid_cmdline(pid)):
            os.kill(pid, signal.SIGKILL)


def clean_stale(paths: state.SimPaths) -> bool:
    """Remove the folder of a sim whose supervisor is gone; True when something was removed."""
    if not paths.root.exists():
        return False
    recorded = state.read_state(paths)
    if recorded is not None and state.supervisor_alive(paths, recorded):
        return False
    _kill_recorded_children(paths)
    _remove(paths)
    return True


def _remove(paths: state.SimPaths) -> None:
    """Remove the sim's folder and its nodes' short-path folder (``<sim>/nodes`` links it)."""
    nodes = paths.root / "nodes"
    if nodes.is_symlink():
        shutil.rmtree(nodes.resolve(), ignore_errors=True)
    shutil.rmtree(paths.root, ignore_errors=True)


def start(
    paths: state.SimPaths,
    bin_dir: Path,
    *,
    api_port: int | None = None,
    shape: topology.Shape | None = None,
    chart: Path | None = None,
    die_with_parent: bool = False,
    timeout_s: float | None = None,
    on_wait: Callable[[str], None] | None = None,
    patience: bool = False,
    image_map: tuple[tuple[str, Path], ...] = (),
    nodes_mode: str = "process",
    racks_per_host: int | None = None,
    shared_informers: bool = True,
    dranet: bool = False,
) -> Started:
    """Start the sim unless it runs already; block until it is ready or has failed.

    ``patience`` selects upstream's node-lifecycle timings (``cluster.SimSettings.patience``);
    ``nodes_mode`` how node components run (``cluster.SimSettings.nodes_mode``), and
    ``racks_per_host`` how many racks each node host process runs in virtual mode (None: the
    supervisor's default, ``cluster.SimSettings.racks_per_host``); ``shared_informers=False``
    gives each in-process component of a virtual node its own watches (a measurement's baseline,
    ``cluster.SimSettings.shared_informers``); ``dranet`` runs DRANET's stand-in on the nodes
    (``cluster.SimSettings.dranet``).
    ``timeout_s`` defaults to 300 s plus helm's wait for the shape (``progress.helm_timeout_s``);
    ``on_wait`` is called with the phase and the supervisor's progress line while it starts.
    """
    recorded = state.read_state(paths)
    if recorded is not None and state.supervisor_alive(paths, recorded):
        if recorded.phase == "ready":
            return Started(paths, already_running=True, cleaned_stale=False)
        raise errors.SimError(
            f"sim '{paths.name}' is already running but {recorded.phase}; "
            f"see {paths.supervisor_log} or run `cdctl sim down --name {paths.name}`"
        )
    cleaned = clean_stale(paths)
    paths.root.mkdir(parents=True, exist_ok=True)
    with paths.supervisor_log.open("ab") as log:
        proc = subprocess.Popen(
            _supervisor_argv(
                paths,
                bin_dir,
                api_port,
                die_with_parent,
                shape or topology.Shape(racks=0),
                chart,
                patience,
                image_map,
                nodes_mode,
                racks_per_host,
                shared_informers,
                dranet,
            ),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=not die_with_parent,
        )
    if timeout_s is None:
        timeout_s = 300.0 + progress.helm_timeout_s((shape or topology.Shape(racks=0)).total_nodes)
    deadline = time.monotonic() + timeout_s
    while True:
        rec = state.read_state(paths)
        if rec is not None and rec.supervisor_pid == proc.pid:
            if rec.phase == "ready":
                return Started(paths, already_running=False, cleaned_stale=cleaned, process=proc)
            if rec.phase == "failed":
                proc.wait(timeout=60)
                raise errors.SimError(rec.error)
        if proc.poll() is not None:
            tail = "\n".join(paths.supervisor_log.read_text(errors="replace").splitlines()[-15:])
            raise errors.SimError(
                f"the sim supervisor exited with code {proc.returncode} before the sim was "
                f"ready; log {paths.supervisor_log}:\n{tail}"
            )
        if time.monotonic() > deadline:
            proc.terminate()
            proc.wait(timeout=60)
            raise errors.SimError(
                f"sim '{paths.name}' was not ready after {timeout_s:.0f}s; "
                f"see {paths.supervisor_log}"
            )
        if on_wait is not None:
            on_wait(
                f"{rec.phase}: {rec.extra['progress']}"
                if rec is not None and rec.extra.get("progress")
                else (rec.phase if rec else "starting")
            )
        # The supervisor is another process; its state file is the only channel. Short sleep.
        time.sleep(0.2)


def stop(
    paths: state.SimPaths,
    *,
    timeout_s: float = 60.0,
    remove: bool = True,
    process: subprocess.Popen[bytes] | None = None,
) -> bool:
    """Stop the sim and (by default) remove its folder; False when there was nothing to stop.

    ``process`` is the supervisor's ``Popen`` when the caller started it, so it is reaped.
    """
    try:
        return _stop(paths, timeout_s=timeout_s, remove=remove)
    finally:
        if process is not None:
            process.wait(timeout=timeout_s)


def _stop(paths: state.SimPaths, *, timeout_s: float, remove: bool) -> bool:
    recorded = state.read_state(paths)
    if recorded is None or not state.supervisor_alive(paths, recorded):
        removed = clean_stale(paths)
        return removed
    pid = recorded.supervisor_pid
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while procs.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if procs.pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        while procs.pid_alive(pid):
            time.sleep(0.05)
    _kill_recorded_children(paths)
    if remove:
        _remove(paths)
    return True


def list_sims(home: Path) -> list[state.SimPaths]:
    """Every sim folder under the sim home."""
    base = home / "sims"
    if not base.is_dir():
        return []
    return [state.SimPaths(home, d.name) for d in sorted(base.iterdir()) if d.is_dir()]
