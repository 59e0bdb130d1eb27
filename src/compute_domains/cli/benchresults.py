"""The result files of ``cdctl bench``: where a run's document goes, and ``cdctl bench report``,
which rewrites docs/benchmarks.md's tables (and pictures) from the newest of them.

``write`` is shared by the commands that measure (``cli/bench.py``'s formation,
``cli/benchchurn.py``); ``report_cmd`` is added to the ``bench`` group by ``cli/bench.py``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from compute_domains.bench import floor, report, scale, writes
from compute_domains.cli import benchpictures, options


def write(
    console: Console,
    kind: str,
    doc: dict[str, Any],
    prefix: str = "",
    out_dir: Path | None = None,
    *,
    out: Path | None = None,
) -> Path:
    """Write a result document under ``out_dir`` (default bench/results/) with the machine it
    ran on, or over ``out`` (an earlier, partial write of the same run); a ``prefix`` keeps a
    one-off run out of the tables ``cdctl bench report`` builds from the newest
    ``formation-*``/``sidebyside-*`` files."""
    if out is None:
        out_dir = out_dir or options.repo_root() / "bench" / "results"
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = out_dir / f"{prefix + '-' if prefix else ''}{kind}-{stamp}.json"
    load = os.getloadavg()[0]
    out.write_text(
        json.dumps(
            {"machine": f"{os.cpu_count()} cores", "load_at_end": load, **doc},
            indent=1,
            default=str,
        )
    )
    console.print(f"results written to {out}")
    return out


@click.command("report")
@click.option(
    "--doc",
    "doc_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Markdown file with bench blocks to rewrite (default docs/benchmarks.md).",
)
@click.option(
    "--pictures/--no-pictures",
    default=True,
    show_default=True,
    help="Also draw the formation curve and phase bars (PNG, beside the result files; needs "
    "matplotlib, the `bench` extra) and show them in the blocks.",
)
def report_cmd(doc_path: Path | None, pictures: bool) -> None:
    """Rewrite the tables in docs/benchmarks.md from the newest results of each kind (and the
    writes-per-kind block from the two result files its marker names); draw the pictures of
    those results and of every `bench:figures` block's files."""
    console = Console()
    root = options.repo_root()
    results = root / "bench" / "results"
    doc_path = doc_path or root / "docs" / "benchmarks.md"
    drawing = benchpictures.module() if pictures else None  # refused before anything is written
    blocks = {}
    drawn: list[Path] = []
    try:
        for kind in report.KINDS:
            found = report.latest(results, kind)
            if found is None:
                console.print(f"no {kind} results under bench/results/: its table is left as it is")
                continue
            path, doc = found
            blocks[kind] = report.render(kind, doc, str(path.relative_to(root)))
            if drawing is not None and kind != "churn":
                shown = drawing.for_file(path)
                blocks[kind] += "\n\n" + drawing.links(shown, doc_path.parent)
                drawn += shown
        blocks["scale"] = scale.table(results)  # every scale run, issue 15
        blocks["floor"] = floor.table(results)  # without a CD, issues 26 and 28
        text = report.update_doc(doc_path.read_text(), blocks)
        text = writes.update_doc(text, results)
        if drawing is not None:
            text, across = drawing.update_doc(text, results, doc_path.parent)
            drawn += across
        doc_path.write_text(text)
    except (OSError, ValueError, KeyError) as err:
        raise click.ClickException(f"{doc_path}: {err!r}") from err
    console.print(f"{doc_path}: {', '.join(blocks) or 'nothing'} updated")
    for p in drawn:
        console.print(f"picture written to {p.relative_to(root)}")
