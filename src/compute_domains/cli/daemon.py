"""``cdctl daemon ...``: run the daemon component (flags and environment → settings → ``run()``)."""

from __future__ import annotations

import click


@click.group("daemon")
def group() -> None:
    """The daemon component (as the Helm chart runs it)."""
