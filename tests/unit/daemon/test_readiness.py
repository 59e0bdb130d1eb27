"""Readiness: the probe's exact-READY rule, and which pod states count as Ready for the clique."""

from __future__ import annotations

from pathlib import Path

import pytest
from lightkube.models.core_v1 import PodCondition, PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import readiness
from compute_domains.daemon.config import CheckSettings


def _pod(phase: str | None, ready: str | None) -> Pod:
    conditions = [] if ready is None else [PodCondition(type="Ready", status=ready)]
    status = None if phase is None else PodStatus(phase=phase, conditions=conditions)
    return Pod(metadata=ObjectMeta(name="p"), status=status)


@pytest.mark.parametrize(
    ("phase", "ready", "expected"),
    [
        ("Running", "True", Readiness.READY),
        ("Running", "False", Readiness.NOT_READY),
        ("Running", None, Readiness.NOT_READY),
        ("Pending", "True", Readiness.NOT_READY),
        ("Succeeded", "True", Readiness.NOT_READY),
        (None, None, Readiness.NOT_READY),
    ],
    ids=["running-ready", "running-unready", "no-condition", "pending", "finished", "no-status"],
)
def test_an_entry_is_ready_only_when_the_pod_runs_and_is_ready(
    phase: str | None, ready: str | None, expected: Readiness
) -> None:
    assert readiness.readiness_of(_pod(phase, ready)) is expected


def test_a_missing_pod_is_not_ready() -> None:
    assert readiness.readiness_of(None) is Readiness.NOT_READY


def _ctl(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-imex-ctl"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


async def test_no_clique_passes_without_running_anything(tmp_path: Path) -> None:
    settings = CheckSettings(clique_id="", ctl_command=str(tmp_path / "absent"))
    result = await readiness.check(settings)
    assert result == readiness.CheckResult(True, "check succeeded (noop, clique ID is empty)")


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
    settings = CheckSettings(
        clique_id="u.1", config_path=tmp_path / "imexd.cfg", ctl_command=_ctl(tmp_path, body)
    )
    result = await readiness.check(settings)
    assert result.ok is ok
    if not ok:
        assert result.message.startswith("IMEX daemon not ready")


async def test_a_hanging_ctl_fails_within_the_timeout(tmp_path: Path) -> None:
    settings = CheckSettings(
        clique_id="u.1", ctl_command=_ctl(tmp_path, "exec sleep 30"), timeout=0.3
    )
    result = await readiness.check(settings)
    assert not result.ok
    assert "no answer in time" in result.message


async def test_a_missing_ctl_tool_fails_clearly(tmp_path: Path) -> None:
    settings = CheckSettings(clique_id="u.1", ctl_command=str(tmp_path / "nope"))
    result = await readiness.check(settings)
    assert not result.ok
    assert "cannot run" in result.message


def test_a_ready_condition_counts_only_after_our_own_check_passed() -> None:
    """After a fast reboot the pod's Ready condition is the earlier container's."""
    gate = readiness.OwnCheckGate()
    gate.pod = Readiness.READY
    assert gate.effective() is Readiness.NOT_READY and gate.wants_check()
    gate.confirmed = True
    assert gate.effective() is Readiness.READY and not gate.wants_check()
    # From then on the kubelet's probe rules: a NotReady pod is a NotReady entry.
    gate.pod = Readiness.NOT_READY
    assert gate.effective() is Readiness.NOT_READY and not gate.wants_check()
    gate.pod = Readiness.READY
    assert gate.effective() is Readiness.READY


def test_a_not_ready_pod_needs_no_own_check() -> None:
    gate = readiness.OwnCheckGate()
    assert gate.effective() is Readiness.NOT_READY and not gate.wants_check()


def test_without_an_own_check_the_condition_is_trusted_at_once() -> None:
    gate = readiness.OwnCheckGate(own_check=False, pod=Readiness.READY)
    assert gate.effective() is Readiness.READY and not gate.wants_check()
