"""``cdctl sim up`` runs DRANET's stand-in unless told ``--no-dranet``; library starts are off."""

from __future__ import annotations

from pathlib import Path

import click

from compute_domains.cli import sim as sim_cli
from compute_domains.sim import lifecycle, state, topology


def test_sim_up_runs_dranet_by_default_and_no_dranet_turns_it_off() -> None:
    opt = next(p for p in sim_cli.up.params if p.name == "dranet")
    assert isinstance(opt, click.Option)
    assert opt.default is True
    assert opt.secondary_opts == ["--no-dranet"]
    ctx = sim_cli.up.make_context("up", ["--no-dranet"])
    assert ctx.params["dranet"] is False
    assert sim_cli.up.make_context("up", []).params["dranet"] is True


def test_the_supervisor_is_asked_for_dranet_only_when_wanted(tmp_path: Path) -> None:
    paths = state.SimPaths(tmp_path, "s")
    shape = topology.Shape(racks=1, nodes_per_rack=1)

    def argv(dranet: bool) -> list[str]:
        return lifecycle._supervisor_argv(paths, tmp_path, None, False, shape, None, dranet=dranet)

    assert "--dranet" in argv(True)
    assert "--dranet" not in argv(False)
    ctx = sim_cli.serve.make_context("serve", argv(True)[5:])
    assert ctx.params["dranet"] is True
