"""``cdctl bench pictures``, and the pictures ``bench report`` and ``bench formation`` draw.

The drawing needs matplotlib, an optional dependency (the ``bench`` extra,
docs/decisions/0018-bench-pictures-matplotlib.md): the bench bundle's target machines run
benchmarks without it, and the pictures are drawn here afterwards from the result files. So
``bench.pictures`` is imported only when a picture is asked for, and its absence is one clear
message, not an ImportError at ``cdctl``'s start.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import click
from rich.console import Console

INSTALL_HINT = "pip install 'compute-domains[bench]' (matplotlib) to draw the pictures"


def available() -> bool:
    """Whether matplotlib is installed."""
    return importlib.util.find_spec("matplotlib") is not None


def module() -> ModuleType:
    """``compute_domains.bench.pictures``; a ClickException without matplotlib.

    Raises:
        click.ClickException: matplotlib is not installed.
    """
    if not available():
        raise click.ClickException(f"matplotlib is not installed: {INSTALL_HINT}")
    from compute_domains.bench import pictures  # only with matplotlib (module docstring)

    return pictures


def after_run(console: Console, result: Path) -> None:
    """Draw a new result file's pictures beside it, or say how to get them."""
    if not available():
        console.print(f"no pictures drawn: {INSTALL_HINT}, then `cdctl bench pictures {result}`")
        return
    try:
        drawn = module().for_file(result)
    except (OSError, ValueError, KeyError) as err:  # the result is written; say, do not fail
        console.print(f"no pictures drawn for {result}: {err!r}")
        return
    for path in drawn:
        console.print(f"picture written to {path}")


@click.command("pictures")
@click.argument(
    "results", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
def pictures_cmd(results: tuple[Path, ...]) -> None:
    """Draw the formation curve and the phase bars of result files, as PNGs beside them."""
    console = Console()
    pictures = module()
    for result in results:
        try:
            drawn = pictures.for_file(result)
        except (OSError, ValueError, KeyError) as err:
            raise click.ClickException(f"{result}: {err!r}") from err
        for path in drawn:
            console.print(f"picture written to {path}")
