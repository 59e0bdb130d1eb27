"""The ``cdctl`` root command: global options, error rendering, sub-command groups."""

from __future__ import annotations

import importlib
import sys

import click

from compute_domains import __version__
from compute_domains.cli import serving
from compute_domains.infra import errors, logs

_COMMANDS = {
    "sim": ("compute_domains.cli.sim", "group"),
    "tools": ("compute_domains.cli.tools", "group"),
    "chart": ("compute_domains.cli.chart", "group"),
    "demo": ("compute_domains.cli.demo", "demo"),
    "controller": ("compute_domains.cli.controller", "group"),
    "plugin": ("compute_domains.cli.plugin", "group"),
    "daemon": ("compute_domains.cli.daemon", "group"),
    "agent": ("compute_domains.cli.agent", "group"),
    "validate": ("compute_domains.cli.validate", "group"),
    "job": ("compute_domains.cli.job", "group"),
    "migrate": ("compute_domains.cli.migrate", "group"),
    "status": ("compute_domains.cli.views", "status"),
    "topology": ("compute_domains.cli.views", "topology"),
    "bench": ("compute_domains.cli.bench", "group"),
}
"""Sub-commands, imported only when used: ``cdctl daemon run`` starts on every node of a forming
domain, on its critical path, so it must not pay for importing the simulator, the views and the
benchmarks."""


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return None
        module, attr = _COMMANDS[cmd_name]
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cdctl")
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    envvar="CD_LOG_LEVEL",
    callback=serving.check_level,
    help=f"Log level of cdctl itself: {serving.LEVEL_HELP}.",
)
@click.option(
    "--log-format",
    default="text",
    show_default=True,
    envvar="CD_LOG_FORMAT",
    type=click.Choice(["text", "json"]),
    help="Log line format.",
)
def cli(log_level: str, log_format: str) -> None:
    """ComputeDomains for Kubernetes: simulator, status views, validation and benchmarks."""
    logs.setup(log_level, "json" if log_format == "json" else "text")


def main() -> None:
    """Console-script entry: run the CLI; project errors become one clear line and exit 1."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except errors.ComputeDomainsError as err:
        click.secho(f"error: {err}", fg="red", err=True)
        sys.exit(1)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
