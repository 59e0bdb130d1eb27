"""``cdctl sim node stop|start|reboot|list``: faults on one simulated node, and the node list."""

from __future__ import annotations

import json

import click

from compute_domains.cli import simoptions
from compute_domains.sim import control


@click.group("node")
def group() -> None:
    """Faults on one simulated node: stop, start, reboot; and the node list."""


def _node_op(name: str, op: str, node: str) -> None:
    answer = control.request(simoptions.paths(name).root / "control.sock", {"op": op, "node": node})
    click.echo(answer)


@group.command("stop")
@simoptions.NAME
@click.argument("node")
def node_stop(name: str, node: str) -> None:
    """Stop heartbeats and kill the node's containers (a power cut)."""
    _node_op(name, "stop", node)


@group.command("start")
@simoptions.NAME
@click.argument("node")
def node_start(name: str, node: str) -> None:
    """Start a stopped node's kubelet again."""
    _node_op(name, "start", node)


@group.command("reboot")
@simoptions.NAME
@click.argument("node")
def node_reboot(name: str, node: str) -> None:
    """Stop and start the node with a new boot id."""
    _node_op(name, "reboot", node)


@group.command("list")
@simoptions.NAME
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def node_list(name: str, output: str) -> None:
    """The sim's nodes: address, clique, whether the kubelet runs."""
    nodes = control.request(simoptions.paths(name).root / "control.sock", {"op": "nodes"})
    if output == "json":
        click.echo(json.dumps(nodes, indent=1))
        return
    for node, info in nodes.items():
        state_word = "running" if info["running"] else "STOPPED"
        click.echo(f"{node:<16} {info['address']:<14} {state_word:<8} {info['clique'] or '-'}")
