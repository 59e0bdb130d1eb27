"""The result of one validation: facts, tables, checks, a verdict; rendered as text or JSON.

Invariants:
- The verdict is derived from the checks alone: any ``FAIL`` fails, otherwise any ``WARN``
  warns, otherwise ``PASS`` when at least one check passed, otherwise ``SKIP`` (nothing could
  be measured here). ``INFO`` checks never change the verdict.
- Exit codes: 0 for PASS, WARN and SKIP, 1 for FAIL; ``NO_GPU_EXIT`` when there is no GPU at all
  (the CLI prints ``NoGpuError`` as one line).
- Rendering is pure; the last text line always starts with ``verdict:``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from typing import Any

from compute_domains.infra import errors

NO_GPU_EXIT = 3
"""Exit code of every validate command on a machine without an NVIDIA GPU."""


class NoGpuError(errors.ConfigError):
    """This machine has no usable NVIDIA GPU (no driver, no NVML, or zero GPUs)."""


class Status(enum.StrEnum):
    """Outcome of one check."""

    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    INFO = "info"
    SKIP = "skip"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Check:
    """One named check with its outcome and a one-line explanation."""

    name: str
    status: Status
    detail: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Table:
    """A small table for the text output (the JSON output carries the structured data)."""

    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    """Everything one validate command found."""

    command: str
    """``node``, ``imex-channels`` or ``nccl``."""
    facts: tuple[tuple[str, str], ...] = ()
    """Key/value lines shown first in the text output."""
    tables: tuple[Table, ...] = ()
    checks: tuple[Check, ...] = ()
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Structured results for ``-o json`` (JSON-serialisable)."""

    @property
    def verdict(self) -> Status:
        """The overall outcome (see the module docstring)."""
        return verdict_of(self.checks)

    @property
    def exit_code(self) -> int:
        """1 when the verdict is FAIL, else 0."""
        return 1 if self.verdict is Status.FAIL else 0


def verdict_of(checks: Sequence[Check]) -> Status:
    """FAIL > WARN > PASS > SKIP; INFO checks are ignored."""
    seen = {c.status for c in checks}
    for status in (Status.FAIL, Status.WARN, Status.PASS):
        if status in seen:
            return status
    return Status.SKIP


def verdict_line(report: Report) -> str:
    """``verdict: PASS (3 pass, 0 fail, ...)``, naming the failing or warning checks."""
    counts = {s: sum(1 for c in report.checks if c.status is s) for s in Status}
    summary = ", ".join(f"{n} {s.value}" for s, n in counts.items() if n)
    bad = [c.name for c in report.checks if c.status in (Status.FAIL, Status.WARN)]
    tail = f"; see: {', '.join(bad)}" if bad else ""
    return f"verdict: {report.verdict.name} ({summary or 'no checks'}){tail}"


def render_table(table: Table) -> list[str]:
    """Left-aligned columns separated by two spaces, with a title line."""
    widths = [len(c) for c in table.columns]
    for row in table.rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [f"{table.title}:", "  " + line(table.columns)] + ["  " + line(r) for r in table.rows]


def render_text(report: Report) -> str:
    """The human-readable report; ends with the verdict line."""
    lines = [f"== cdctl validate {report.command} =="]
    if report.facts:
        width = max(len(k) for k, _ in report.facts)
        lines += [f"{k.ljust(width)}  {v}" for k, v in report.facts]
    for table in report.tables:
        lines += ["", *render_table(table)]
    if report.checks:
        lines += ["", "checks:"]
        lines += [f"  [{c.status.name:<4}] {c.name}: {c.detail}" for c in report.checks]
    lines += ["", verdict_line(report)]
    return "\n".join(lines) + "\n"


def to_json(report: Report) -> dict[str, Any]:
    """The report as a JSON document (facts, data, checks, verdict)."""
    return {
        "command": report.command,
        "facts": dict(report.facts),
        "data": dict(report.data),
        "checks": [
            {"name": c.name, "status": c.status.value, "detail": c.detail} for c in report.checks
        ],
        "verdict": report.verdict.value,
    }


def render_json(report: Report) -> str:
    """``to_json`` serialised with two-space indentation."""
    return json.dumps(to_json(report), indent=2, sort_keys=False) + "\n"


def render(report: Report, output: str) -> str:
    """``render_json`` for ``json``, ``render_text`` otherwise."""
    return render_json(report) if output == "json" else render_text(report)
