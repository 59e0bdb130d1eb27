"""``views.live``: the demo's live table ends its line when the output is not a terminal."""

import io
import re

import pytest
from rich.console import Console
from rich.table import Table

from compute_domains.cli import views


def _table() -> Table:
    table = Table("NODE")
    table.add_row("gb200-r0-n00")
    return table


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_the_next_output_starts_on_its_own_line(terminal: bool) -> None:
    out = io.StringIO()
    console = Console(file=out, width=40, force_terminal=terminal, color_system=None)
    with views.live(console) as display:
        display.update(_table())
    console.print("formed in 8.5s")
    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue()).splitlines()
    assert "formed in 8.5s" in lines, lines  # not glued to the border: └───┘formed in 8.5s
    above = lines[lines.index("formed in 8.5s") - 1]
    assert above.startswith("└") and above.endswith("┘"), lines  # and no blank line between
