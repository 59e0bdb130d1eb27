"""``cdctl plugin ...``: run the plugin component (flags and environment → settings → ``run()``)."""

from __future__ import annotations

import click


@click.group("plugin")
def group() -> None:
    """The plugin component (as the Helm chart runs it)."""
