"""Which benchmark pictures ``cdctl bench report`` draws, where they go, and the Markdown links.

- **Per result file** (``for_file``): ``<stem>.curve.png`` (the formation curve) and
  ``<stem>.phases.png`` (the phase bars) beside ``<stem>.json``, one panel per N, one colour per
  driver or scope.
- **A set across files** (``update_doc``): a block of docs/benchmarks.md between
  ``<!-- bench:figures name=NAME n=N files=A.json,B.json title="..." -->`` (the title is
  optional) and ``<!-- /bench:figures -->`` gets ``bench/results/NAME.curve.png`` and
  ``NAME.phases.png``: the runs of N pods of every named file in one panel (e.g. one scope per
  file, all at N = 1,152), and the block is rewritten to show them. Each named file also gets
  its own two pictures (every N of it) beside it, as above.

Drawing is ``bench.draw``'s (matplotlib, the ``bench`` extra); what is drawn is
``bench.figures``'.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compute_domains.bench import draw, figures

_MARKER = re.compile(
    r"(<!-- bench:figures name=(?P<name>[\w.-]+) n=(?P<n>\d+) files=(?P<files>[\w.,-]+)"
    r'(?: title="(?P<title>[^"]*)")? -->\n)'
    r".*?(<!-- /bench:figures -->)",
    re.S,
)


def _nodes(found: Sequence[figures.Source]) -> int:
    return min(int(r.get("nodes") or r["n"]) for _, r in found)


def _heading(n: int, found: Sequence[figures.Source]) -> str:
    nodes = _nodes(found)
    return f"N = {n:,} pods" + ("" if nodes == n else f" on {nodes:,} nodes")


def file_panels(doc: dict[str, Any]) -> list[draw.Panel]:
    """One panel per N of a result document."""
    return [
        (_heading(n, figures.sources(doc, n)), figures.sources(doc, n)) for n in figures.sizes(doc)
    ]


def _draw(stem: Path, title: str, panels: Sequence[draw.Panel]) -> list[Path]:
    curve = stem.with_name(stem.name + ".curve.png")
    phases = stem.with_name(stem.name + ".phases.png")
    draw.save(draw.curve_figure(f"{title}: formation curve", panels), curve)
    draw.save(draw.phases_figure(f"{title}: phases", panels), phases)
    return [curve, phases]


def for_file(path: Path) -> list[Path]:
    """Draw the two pictures of the result file ``path`` beside it; their paths.

    Raises:
        ValueError: the file has no formation results to draw.
    """
    doc = json.loads(path.read_text())
    panels = file_panels(doc)
    if not panels:
        raise ValueError(f"{path.name}: no formation results to draw")
    return _draw(path.with_suffix(""), path.name, panels)


def gather(results_dir: Path, n: int, files: Sequence[str]) -> list[figures.Source]:
    """The results of ``n`` pods of every file in ``files``, in that order; a label that an
    earlier file already gave is told apart by its file's name.

    Raises:
        ValueError: a file has no results for ``n`` (a picture would silently miss it).
    """
    found: list[figures.Source] = []
    for file in files:
        doc = json.loads((results_dir / file).read_text())
        mine = figures.sources(doc, n)
        if not mine:
            raise ValueError(f"{file}: no results for N = {n}")
        seen = {label for label, _ in found}
        found += [(f"{lbl}, {file}" if lbl in seen else lbl, r) for lbl, r in mine]
    return found


def across(
    results_dir: Path, name: str, n: int, files: Sequence[str], title: str = ""
) -> list[Path]:
    """Draw the runs of ``n`` pods of ``files`` (``gather``) into one panel each picture
    (``results_dir/NAME.curve.png``, ``NAME.phases.png``); their paths."""
    found = gather(results_dir, n, files)
    title = title or f"{name} ({len(files)} result files)"
    return _draw(results_dir / name, title, [(_heading(n, found), found)])


def links(paths: Sequence[Path], doc_dir: Path) -> str:
    """Markdown that shows ``paths`` from a document in ``doc_dir``."""
    out = []
    for p in paths:
        what = "formation curve" if p.name.endswith(".curve.png") else "phases"
        out.append(f"![{what}: {p.name}]({Path(os.path.relpath(p, doc_dir)).as_posix()})")
    return "\n\n".join(out)


def update_doc(text: str, results_dir: Path, doc_dir: Path) -> tuple[str, list[Path]]:
    """``text`` with each ``bench:figures`` block drawn and rewritten; the pictures drawn.

    Raises:
        OSError, ValueError: a named result file cannot be read or has no such N.
    """
    drawn: list[Path] = []

    def block(m: re.Match[str]) -> str:
        files = [f for f in m.group("files").split(",") if f]
        name, n, title = m.group("name"), int(m.group("n")), m.group("title") or ""
        paths = across(results_dir, name, n, files, title)
        drawn.extend(paths)
        for file in files:
            drawn.extend(for_file(results_dir / file))
        return m.group(1) + links(paths, doc_dir) + "\n" + m.group(6)

    return _MARKER.sub(block, text), drawn
