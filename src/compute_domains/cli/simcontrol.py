"""``cdctl sim control-plane restart|pause COMPONENT``: fault drills on the sim's control plane.

As ``cdctl sim node`` faults a node, these fault a control-plane process, through the sim's
control socket; the supervisor does the work (``ControlPlane.restart``/``pause``) and knows the
exit is on purpose, so the sim goes on. The component names are ``sim.drills``'s.
"""

from __future__ import annotations

import sys

import click

from compute_domains.cli import simoptions
from compute_domains.sim import control, drills

COMPONENT = click.argument("component", type=click.Choice(list(drills.SHORT_NAMES)))
RESTART_TIMEOUT_S = 300.0
"""How long ``restart`` waits for the supervisor's answer beyond ``--down``: the stop's grace
(10 s) and the new process's start-up limit (120 s) with room for a loaded machine."""


@click.group("control-plane")
def group() -> None:
    """Fault drills on the sim's control plane: restart a component, pause one."""


def restarted_line(done: drills.Restarted) -> str:
    """What ``restart`` prints once the component serves again."""
    return (
        f"{done.component} restarted: down {done.down_s:.1f}s "
        f"({done.signal}, pid {done.old_pid} -> {done.pid}); healthy again"
    )


def paused_line(component: str, held_s: float, *, early: bool, interrupted: bool) -> str:
    """What ``pause`` prints once the component runs again."""
    why = " (interrupted)" if interrupted else " (its client went away)" if early else ""
    return f"{component} continued (SIGCONT) after {held_s:.1f}s{why}"


@group.command("restart")
@simoptions.NAME
@COMPONENT
@click.option(
    "--down",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Seconds to keep it stopped before starting it again.",
)
@click.option(
    "--kill", is_flag=True, help="End it with SIGKILL (a crash) instead of SIGTERM (a clean stop)."
)
def restart(name: str, component: str, down: float, kill: bool) -> None:
    """Stop COMPONENT and start it again on the same address, port, certificates and data;
    wait until it is healthy (the API server: /readyz) and print how long it was down."""
    answer = control.request(
        simoptions.paths(name).root / "control.sock",
        {"op": "restart", "component": drills.component(component), "down": down, "kill": kill},
        timeout=RESTART_TIMEOUT_S + down,
    )
    click.echo(restarted_line(drills.Restarted.from_doc(answer)))


@group.command("pause")
@simoptions.NAME
@COMPONENT
@click.option(
    "--seconds",
    type=click.FloatRange(min=0, min_open=True, max=drills.MAX_PAUSE_S),
    required=True,
    help="How long to keep it stopped.",
)
def pause(name: str, component: str, seconds: float) -> None:
    """Freeze COMPONENT (SIGSTOP) for --seconds, then let it go on (SIGCONT). Interrupting
    this command (Ctrl-C) continues it at once; so does the sim stopping."""
    full = drills.component(component)
    click.echo(f"{full} paused (SIGSTOP) for {seconds:g}s; Ctrl-C continues it early", err=True)
    answer, interrupted = control.request_interruptible(
        simoptions.paths(name).root / "control.sock",
        {"op": "pause", "component": full, "seconds": seconds},
        timeout=seconds + 60.0,
    )
    click.echo(
        paused_line(
            full,
            float(answer["pausedSeconds"]),
            early=bool(answer["early"]),
            interrupted=interrupted,
        )
    )
    if interrupted:
        # sys.exit, not click's Exit: ``cdctl`` runs click with ``standalone_mode=False``,
        # which returns an Exit's code instead of exiting with it.
        sys.exit(130)
