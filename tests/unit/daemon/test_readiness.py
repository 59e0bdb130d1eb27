"""Readiness: which pod states count as Ready for the clique."""

from __future__ import annotations

import pytest
from lightkube.models.core_v1 import PodCondition, PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import readiness


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
