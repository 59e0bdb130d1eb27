"""``cdctl controller ...``: the controller component as the chart runs it."""

from __future__ import annotations

import click


@click.group("controller")
def group() -> None:
    """The controller component (as the Helm chart runs it)."""
