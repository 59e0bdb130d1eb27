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


def test_a_ready_condition_counts_only_while_our_own_check_passes() -> None:
    """After a fast reboot the pod's Ready condition is the earlier container's."""
    gate = readiness.OwnCheckGate()
    gate.pod = Readiness.READY
    assert gate.effective() is Readiness.NOT_READY
    gate.own_ok = True
    assert gate.effective() is Readiness.READY
    # The kubelet's probe can take it away ...
    gate.pod = Readiness.NOT_READY
    assert gate.effective() is Readiness.NOT_READY
    gate.pod = Readiness.READY
    assert gate.effective() is Readiness.READY
    # ... and so can our own check, without waiting for the probe.
    gate.own_ok = False
    assert gate.effective() is Readiness.NOT_READY


def test_our_own_check_alone_is_not_ready() -> None:
    gate = readiness.OwnCheckGate(own_ok=True)
    assert gate.effective() is Readiness.NOT_READY


def test_without_an_own_check_the_condition_is_trusted_at_once() -> None:
    gate = readiness.OwnCheckGate(own_check=False, pod=Readiness.READY)
    assert gate.effective() is Readiness.READY
