"""``cdctl plugin ...``: the plugin component as the chart runs it."""

from __future__ import annotations

import click


@click.group("plugin")
def group() -> None:
    """The plugin component (as the Helm chart runs it)."""
