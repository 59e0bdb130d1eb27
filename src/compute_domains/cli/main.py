"""The ``cdctl`` root command: global options, error rendering, sub-command groups."""

from __future__ import annotations

import sys

import click

from compute_domains import __version__
from compute_domains.cli import controller, daemon, demo, plugin, sim, tools, views
from compute_domains.cli import validate as validate_cli
from compute_domains.infra import errors, logs


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="cdctl")
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    envvar="CD_LOG_LEVEL",
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="Log level of cdctl itself.",
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


cli.add_command(sim.group)
cli.add_command(tools.group)
cli.add_command(demo.demo)
cli.add_command(controller.group)
cli.add_command(plugin.group)
cli.add_command(daemon.group)
cli.add_command(views.status)
cli.add_command(views.topology)
cli.add_command(validate_cli.group)


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
