"""``cdctl daemon check`` through the process entry: same answers, none of the heavy imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compute_domains.cli import daemonopts

HEAVY = ("asyncio", "click", "lightkube", "httpx", "grpc", "compute_domains.cli.main")


_SCRIPT = """
import json, sys
from compute_domains.cli import entry
sys.argv = ["cdctl", *json.loads(sys.argv[1])]
try:
    entry.main()
except SystemExit as stop:
    heavy = sorted(m for m in sys.modules if m in HEAVY or m.split(".")[0] in HEAVY)
    print(json.dumps({"rc": stop.code, "heavy": heavy}), file=sys.stderr)
    raise
"""


def _run(args: list[str], clique: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CLIQUE_ID"}
    if clique is not None:
        env["CLIQUE_ID"] = clique
    script = f"HEAVY = {HEAVY!r}\n{_SCRIPT}"
    return subprocess.run(
        [sys.executable, "-c", script, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def _report(res: subprocess.CompletedProcess[str]) -> dict[str, object]:
    report: dict[str, object] = json.loads(res.stderr.strip().splitlines()[-1])
    return report


def test_no_clique_passes_without_heavy_imports() -> None:
    res = _run(["daemon", "check"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "check succeeded (noop, clique ID is empty)"
    assert _report(res)["heavy"] == []


@pytest.mark.parametrize(
    ("ctl_body", "ok"),
    [
        ("echo READY", True),
        ("echo WAITING_FOR_PEERS", False),
        ("printf READY", False),
        ("echo READY; exit 1", False),
    ],
)
def test_ctl_answer_decides(tmp_path: Path, ctl_body: str, ok: bool) -> None:
    ctl = tmp_path / "ctl"
    ctl.write_text(f"#!/bin/sh\n{ctl_body}\n")
    ctl.chmod(0o755)
    # The full command's logging flags are accepted and ignored by the probe path.
    res = _run(["daemon", "check", "-v", "6", "--imex-ctl", str(ctl)], clique="c.1")
    assert res.returncode == (0 if ok else 1), res.stderr
    assert _report(res)["heavy"] == []
    if not ok:
        assert "IMEX daemon not ready" in res.stderr


def test_missing_ctl_is_not_ready(tmp_path: Path) -> None:
    res = _run(["daemon", "check", "--imex-ctl", str(tmp_path / "nope")], clique="c")
    assert res.returncode == 1
    assert "cannot run" in res.stderr


def test_help_lists_the_probe_flags_without_heavy_imports() -> None:
    res = _run(["daemon", "check", "--help"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: cdctl daemon check")
    for flag in ("--cliqueid", "--imex-config", "--imex-ctl", "--timeout"):
        assert flag in res.stdout
    assert _report(res)["heavy"] == []


def test_daemon_run_starts_without_click() -> None:
    """``daemon run`` reads its flags without click; its errors read as the full CLI's."""
    res = _run(["daemon", "run", "--node-name", "n1"])
    assert res.returncode == 1
    assert "error: COMPUTE_DOMAIN_UUID is empty" in res.stderr
    heavy = _report(res)["heavy"]
    assert isinstance(heavy, list)
    assert "click" not in heavy and "compute_domains.cli.main" not in heavy


def test_daemon_run_help_is_clicks() -> None:
    res = _run(["daemon", "run", "--help"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: cdctl daemon run")
    for opt in daemonopts.RUN_OPTIONS:
        assert opt.flags[0] in res.stdout


def test_daemon_run_usage_errors_are_clicks() -> None:
    res = _run(["daemon", "run", "--metrics-port", "70000"])
    assert res.returncode == 2
    assert "Invalid value for '--metrics-port'" in res.stderr
