"""The light ``nvidia-imex-ctl -q`` answers exactly as the full tool, and only what it knows."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_domains.sim import imex, imex_query
from tests.unit.sim import imex_service


def _both(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, object]:
    """(status, stdout, stderr) of the light path and of the full tool for ``argv``."""
    light = imex_query.main(argv)
    light_out = capsys.readouterr()
    full = imex.main_ctl(argv)
    full_out = capsys.readouterr()
    return (light, light_out.out, light_out.err), (full, full_out.out, full_out.err)


@pytest.fixture
def server() -> Iterator[tuple[int, list[bytes]]]:
    """A command service on 127.0.0.1 that answers every query READY."""
    with imex_service.answering({"t": "status", "state": "READY"}) as port:
        yield port, []


def _config(tmp_path: Path, body: str, nodes: bool = True) -> Path:
    nodes_file = tmp_path / "nodes.cfg"
    if nodes:
        nodes_file.write_text("10.0.0.1\n")
    cfg = tmp_path / "imexd.cfg"
    cfg.write_text(f"IMEX_NODE_CONFIG_FILE={nodes_file}\n{body}")
    return cfg


@pytest.mark.parametrize(
    ("body", "nodes"),
    [
        ("IMEX_CMD_PORT=1\nIMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\n", True),  # refused
        ("IMEX_CMD_ENABLED=0\n", True),
        ("IMEX_CMD_PORT=\n", True),  # no endpoint at all
        (f"IMEX_CMD_PORT=\nIMEX_CMD_UNIX_DOMAIN_PATH={'/nonexistent/imex.sock'}\n", True),
        ("IMEX_CMD_PORT=1\n", False),  # unreadable nodes file
    ],
)
def test_failures_read_as_the_full_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, nodes: bool
) -> None:
    cfg = _config(tmp_path, body, nodes)
    light, full = _both(["-c", str(cfg), "-q"], capsys)
    assert light == full
    assert light[0] == 1


def test_missing_config_reads_as_the_full_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    light, full = _both(["-q", "-c", str(tmp_path / "none.cfg")], capsys)
    assert light == full
    assert "Failed to open config file" in str(light[2])


def test_ready_answer_is_printed_as_the_full_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: tuple[int, list[bytes]]
) -> None:
    port, _ = server
    cfg = _config(tmp_path, f"IMEX_CMD_PORT={port}\nIMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\n")
    light, full = _both(["-c", str(cfg), "-q", "-t", "2000"], capsys)
    assert light == full == (0, "READY\n", "")


_HEAVY_PROBE = """
import runpy, sys
sys.argv = ["nvidia-imex-ctl", *sys.argv[1:]]
try:
    runpy.run_module("compute_domains.sim.imex_main", run_name="__main__")
except SystemExit as stop:
    heavy = sorted(m for m in ("asyncio", "typing", "argparse") if m in sys.modules)
    print(f"rc={stop.code} heavy={heavy}", file=sys.stderr)
"""


def test_the_ctl_process_answers_without_importing_asyncio(
    tmp_path: Path, server: tuple[int, list[bytes]]
) -> None:
    """The stand-in's ``-q`` process, run as the drivers run it, imports no asyncio: that was
    two thirds of its CPU, spent on every node's check while a domain forms (a native
    ``nvidia-imex-ctl`` spends none of it)."""
    port, _ = server
    cfg = _config(tmp_path, f"IMEX_CMD_PORT={port}\nIMEX_CMD_BIND_INTERFACE_IP=127.0.0.1\n")
    done = subprocess.run(
        [sys.executable, "-c", _HEAVY_PROBE, "ctl", "-c", str(cfg), "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout == "READY\n"
    assert done.stderr.strip().splitlines()[-1] == "rc=0 heavy=[]"


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["-N"],
        ["-c", "x"],
        ["-q", "-q"],
        ["-q", "-j"],
        ["-q", "-i", "127.0.0.1", "1"],
        ["-q", "-u", "/s"],
        ["-q", "-c"],
        ["-q", "-c", "-t"],
        ["-q", "-t", "soon"],
        ["-qc", "x"],
        ["-q", "--help"],
    ],
)
def test_other_command_lines_go_to_the_full_tool(argv: list[str]) -> None:
    assert imex_query.main(argv) is None


@pytest.mark.parametrize(
    "where",
    [
        (("127.0.0.1", 1), None),  # refused
        (None, "/nonexistent/imex.sock"),
        (("127.0.0.1", 0), None),  # the server fixture: READY
    ],
)
def test_the_coroutine_query_answers_as_the_blocking_one(
    where: imex_query.Where, server: tuple[int, list[bytes]]
) -> None:
    """Virtual nodes ask their IMEX stand-in from the event loop (``aquery``): the same answer,
    the same failure message, as the program's blocking ``query``."""
    tcp, unix = where
    if tcp is not None and tcp[1] == 0:
        where = ((tcp[0], server[0]), unix)

    def blocking() -> tuple[int, str]:
        out = io.StringIO()
        try:
            imex_query.query(where, 2.0, out)
        except imex_query.QueryError as failure:
            return failure.status, str(failure)
        return 0, out.getvalue()

    async def coroutine() -> tuple[int, str]:
        out = io.StringIO()
        try:
            await imex_query.aquery(where, 2.0, out)
        except imex_query.QueryError as failure:
            return failure.status, str(failure)
        return 0, out.getvalue()

    assert asyncio.run(coroutine()) == blocking()
