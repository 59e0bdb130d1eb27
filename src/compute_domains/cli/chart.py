"""``cdctl chart package``: the versioned chart archive a user pins (``make chart``)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from compute_domains.cli import options, tools
from compute_domains.sim import chart_archive


@click.group("chart")
def group() -> None:
    """The project's Helm chart as an archive (deploy/helm/compute-domains)."""


@group.command("package")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=lambda: options.repo_root() / "build",
    show_default="build/ of this checkout",
    help="Folder the archive is written into.",
)
def package(out: Path) -> None:
    """Lint the chart and write OUT/compute-domains-<version>.tgz (CRDs in crds/); print its path.

    Install it with `helm install compute-domains ./compute-domains-<version>.tgz -n <ns>`.
    """
    toolset = tools.build_tools(Console(stderr=True, quiet=True))
    settings = chart_archive.ChartSettings(chart=options.chart_dir(), out=out)
    archive = chart_archive.package(settings, toolset.path("helm"))
    click.echo(str(archive.path))
    click.echo(
        f"chart {archive.name} {archive.version} (app {archive.app_version}), "
        f"CRDs: {', '.join(archive.crds)}",
        err=True,
    )
