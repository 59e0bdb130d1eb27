"""``cdctl tools build|path``: build the pinned upstream tools into the cache, with progress."""

from __future__ import annotations

import asyncio

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from compute_domains.cli import options
from compute_domains.sim import toolchain


def build_tools(console: Console | None = None) -> toolchain.Toolset:
    """Build (or find cached) tools, showing one progress bar per tool on stderr."""
    console = console or Console(stderr=True)
    settings = options.toolchain_settings()
    with Progress(
        TextColumn("[bold]{task.fields[tool]:<11}"),
        TextColumn("{task.fields[step]:<9}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        ids: dict[str, TaskID] = {}

        def report(p: toolchain.Progress) -> None:
            if p.tool not in ids:
                ids[p.tool] = bar.add_task("", tool=p.tool, step=p.step, total=p.total)
            bar.update(ids[p.tool], step=p.step, completed=p.done, total=max(p.total, 1))

        toolset, timings = asyncio.run(toolchain.ensure_built(settings, report))
    total = sum(timings.values())
    console.print(f"tools ready in {total:.1f}s: {toolset.bin_dir}")
    return toolset


@click.group("tools")
def group() -> None:
    """Build the pinned upstream tools (kube-apiserver, etcd, helm, ...) the simulator runs."""


@group.command("build")
def build() -> None:
    """Build what is missing or corrupt; print where the tools are."""
    build_tools()


@group.command("path")
def path() -> None:
    """Print the folder of the built tools (builds them first if needed)."""
    toolset = build_tools(Console(stderr=True, quiet=True))
    click.echo(str(toolset.bin_dir))
