"""``cdctl daemon ...``: the daemon component as the chart runs it."""

from __future__ import annotations

import click


@click.group("daemon")
def group() -> None:
    """The daemon component (as the Helm chart runs it)."""
