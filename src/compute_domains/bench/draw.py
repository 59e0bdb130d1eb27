"""The benchmark pictures as PNGs: the formation curve and the phase bars (``bench.figures``).

matplotlib draws them through its Agg canvas on ``Figure`` objects of their own, never pyplot:
no global figure registry and no GUI backend (docs/decisions/0018-bench-pictures-matplotlib.md).
Everything a picture shows comes from ``bench.figures``; this module only places it.

Invariants:
- The same input gives the same PNG bytes: the PNG carries no metadata (no software version, no
  date), and the fonts are matplotlib's own (DejaVu Sans, shipped with it).
- One colour per driver or scope, in the order first met, the same in both pictures of a set;
  one line style per series (``figures.SERIES``).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from compute_domains.bench import figures

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf")
"""Distinguishable on screen and in print (matplotlib's tab10, reordered: blue, red, green...)."""
_STYLES = {"workloads_running": "-", "entries_ready": "--", "daemons_ready": ":"}
_MARKERS = {"workloads_running": "o", "entries_ready": "s", "daemons_ready": "^"}
_NAMES = {key: what for key, what, _ in figures.SERIES}
_PHASE_NAMES = dict(figures.PHASES)
_WIDTH_IN = 9.0
_DPI = 100

Panel = tuple[str, Sequence[figures.Source]]
"""(title, the sources one panel shows): one N of a result file, or one N across files."""


def colours(panels: Sequence[Panel]) -> dict[str, str]:
    """Driver or scope label → colour, in the order the labels first appear."""
    labels: list[str] = []
    for _, found in panels:
        labels += [name for name, _ in found if name not in labels]
    return {name: _COLOURS[i % len(_COLOURS)] for i, name in enumerate(labels)}


def _curve_panel(
    ax: Axes, title: str, found: Sequence[figures.Source], hue: dict[str, str]
) -> None:
    partial = False
    drawn = figures.lines(found)
    for line in drawn:
        alpha = 1.0 if line.run == 0 else 0.45  # later repeats drawn fainter
        colour = hue[line.label]
        if line.partial:
            partial = True
            ax.plot(
                line.xs,
                line.ys,
                _MARKERS[line.series],
                color=colour,
                alpha=alpha,
                ms=7,
                clip_on=False,  # a point at 0 s (Ready before the apply) shows whole
            )
        else:  # starts at (0, 0): nothing had got there at the apply
            ax.step(
                (0.0, *line.xs),
                (0, *line.ys),
                _STYLES[line.series],
                where="post",
                color=colour,
                alpha=alpha,
                lw=1.6,
            )
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_xlabel("seconds since the apply")
    ax.set_ylabel("pods or entries")
    # The last arrival and the full count stay inside the frame (autoscaling clips them).
    ax.set_xlim(0, 1.04 * max((x for line in drawn for x in line.xs), default=1.0) or 1.0)
    ax.set_ylim(0, 1.04 * max((line.total for line in drawn), default=1))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # pods and entries come whole
    ax.grid(True, alpha=0.3)
    if partial:
        ax.text(
            0.99,
            0.03,
            "markers: only the time all had got there\n(no per-pod times in this result file)",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=8,
            color="#555555",
        )


def _legend(fig: Figure, hue: dict[str, str], series: Sequence[str]) -> None:
    handles = [Line2D([], [], color=c, lw=3, label=name) for name, c in hue.items()]
    handles += [
        Line2D([], [], color="black", ls=_STYLES[s], marker=_MARKERS[s], ms=5, label=_NAMES[s])
        for s in series
    ]
    fig.legend(
        handles=handles,
        loc="outside lower center",  # below the panels (constrained layout makes room)
        ncol=min(len(handles), 3),
        fontsize=8,
        frameon=False,
    )


def curve_figure(title: str, panels: Sequence[Panel]) -> Figure:
    """The formation curve, one panel per entry of ``panels`` (one N each)."""
    hue = colours(panels)
    fig = Figure(figsize=(_WIDTH_IN, 1.2 + 3.2 * len(panels)), dpi=_DPI, layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    shown: set[str] = set()
    for ax, (heading, found) in zip(axes, panels, strict=True):
        _curve_panel(ax, heading, found, hue)
        shown |= {line.series for line in figures.lines(found)}
    fig.suptitle(title, fontsize=11)
    _legend(fig, hue, [key for key, _, _ in figures.SERIES if key in shown])
    return fig


def _bars_panel(ax: Axes, title: str, found: Sequence[figures.Source], hue: dict[str, str]) -> None:
    found_bars = figures.bars(found)
    phases = [p for p, _ in figures.PHASES if any(b.phase == p for b in found_bars)]
    names = [name for name, _ in found]
    height = 0.8 / max(len(names), 1)
    for bar in found_bars:
        y = phases.index(bar.phase) + (names.index(bar.label) - (len(names) - 1) / 2) * height
        err = [[bar.median - bar.low], [bar.high - bar.median]] if bar.runs > 1 else None
        ax.barh(
            y,
            bar.median,
            height=height * 0.9,
            color=hue[bar.label],
            xerr=err,
            error_kw={"elinewidth": 1, "capsize": 2},
        )
        ax.text(bar.high, y, f" {bar.median:.1f}", va="center", fontsize=7)
    ax.set_yticks(range(len(phases)), [_PHASE_NAMES[p] for p in phases], fontsize=8)
    ax.invert_yaxis()  # the first phase on top, as a formation passes them
    ax.set_title(title, fontsize=10, loc="left")
    ax.set_xlabel("seconds after the apply at which every one had got there")
    ax.set_xlim(left=0)
    ax.margins(x=0.1)
    ax.grid(True, axis="x", alpha=0.3)


def phases_figure(title: str, panels: Sequence[Panel]) -> Figure:
    """The phase bars, one panel per entry of ``panels``; median, whiskers min..max."""
    hue = colours(panels)
    rows = [len({b.phase for b in figures.bars(found)}) for _, found in panels]
    fig = Figure(
        figsize=(_WIDTH_IN, 1.0 + sum(0.3 * r + 1.0 for r in rows)), dpi=_DPI, layout="constrained"
    )
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=[r + 3 for r in rows])[:, 0]
    for ax, (heading, found) in zip(axes, panels, strict=True):
        _bars_panel(ax, heading, found, hue)
    fig.suptitle(title, fontsize=11)
    _legend(fig, hue, [])
    return fig


def save(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as a PNG without metadata (same figure, same bytes)."""
    # Drawn into memory and written here: given a path, the PNG writer opens a file of its own
    # that it left to the garbage collector now and then (an unclosed-file warning, an error
    # under pytest's filterwarnings = error).
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    path.write_bytes(buf.getvalue())
    return path
