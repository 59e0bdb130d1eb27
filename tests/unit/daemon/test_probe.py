"""The daemon's probe: passes only when the local IMEX daemon answers exactly READY."""

from __future__ import annotations

from pathlib import Path

import pytest

from compute_domains.daemon import probe


def _ctl(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-imex-ctl"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


async def test_no_clique_passes_without_running_anything(tmp_path: Path) -> None:
    settings = probe.CheckSettings(clique_id="", ctl_command=str(tmp_path / "absent"))
    result = await probe.check(settings)
    assert result == probe.CheckResult(True, "check succeeded (noop, clique ID is empty)")


@pytest.mark.parametrize(
    ("body", "ok"),
    [
        (r'[ "$1 $3" = "-c -q" ] && printf "READY\n"', True),
        (r'printf "READY"', False),
        (r'printf "READY\n\n"', False),
        (r'printf "READY\n" >&2', True),
        (r'printf "READY\nwarning: x\n"', False),
        (r'printf "UNAVAILABLE\n"', False),
        (r'printf "READY\n"; exit 1', False),
        (r"echo 'connection refused' >&2; exit 1", False),
    ],
    ids=[
        "ready",
        "no-newline",
        "extra-line",
        "stderr-counts",
        "trailing-text",
        "other-state",
        "nonzero-exit",
        "unreachable",
    ],
)
async def test_check_passes_only_on_exactly_ready(tmp_path: Path, body: str, ok: bool) -> None:
    settings = probe.CheckSettings(
        clique_id="u.1", config_path=tmp_path / "imexd.cfg", ctl_command=_ctl(tmp_path, body)
    )
    result = await probe.check(settings)
    assert result.ok is ok
    if not ok:
        assert result.message.startswith("IMEX daemon not ready")


async def test_a_hanging_ctl_fails_within_the_timeout(tmp_path: Path) -> None:
    settings = probe.CheckSettings(
        clique_id="u.1", ctl_command=_ctl(tmp_path, "exec sleep 30"), timeout=0.3
    )
    result = await probe.check(settings)
    assert not result.ok
    assert "no answer in time" in result.message


async def test_a_missing_ctl_tool_fails_clearly(tmp_path: Path) -> None:
    settings = probe.CheckSettings(clique_id="u.1", ctl_command=str(tmp_path / "nope"))
    result = await probe.check(settings)
    assert not result.ok
    assert "cannot run" in result.message
