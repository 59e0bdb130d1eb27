"""The install's pod counter: status writes and Ready transitions per component (issue 28)."""

from __future__ import annotations

from typing import Any, cast

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.bench import podflaps


def _pod(uid: str, *, ready: bool, phase: str = "Running", component: str = "imex-agent") -> Any:
    return Pod.from_dict(
        {
            "metadata": {
                "name": f"agent-{uid}",
                "uid": uid,
                "labels": {podflaps.COMPONENT_LABEL: component},
            },
            "spec": {"nodeName": f"node-{uid}", "containers": [{"name": "c", "image": "i"}]},
            "status": {
                "phase": phase,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
    )


def test_a_flap_is_two_transitions_one_of_them_ready_to_not_ready() -> None:
    flaps = podflaps.PodFlaps(cast(AsyncClient, None), "ns")
    flaps.see("ADDED", _pod("a", ready=False, phase="Pending"))  # first sight: no transition
    flaps.see("MODIFIED", _pod("a", ready=False))  # a status write, Ready unchanged
    flaps.see("MODIFIED", _pod("a", ready=True))
    flaps.see("MODIFIED", _pod("a", ready=True))  # same status (a label patch): no write
    flaps.see("MODIFIED", _pod("a", ready=False))
    flaps.see("MODIFIED", _pod("a", ready=True))
    flaps.see("ADDED", _pod("p", ready=True, component="kubelet-plugin"))
    counts = flaps.counts
    assert counts["imex-agent"] == podflaps.Counts(
        pods=1, status_writes=4, ready_transitions=3, flaps=1
    )
    assert counts["kubelet-plugin"] == podflaps.Counts(pods=1)
    assert len(flaps.flapped) == 1 and flaps.flapped[0].startswith("agent-a on node-a at ")


def test_a_deleted_pod_counts_again_as_new() -> None:
    flaps = podflaps.PodFlaps(cast(AsyncClient, None), "ns")
    flaps.see("ADDED", _pod("a", ready=True))
    flaps.see("DELETED", _pod("a", ready=True))
    flaps.see("ADDED", _pod("a", ready=False))
    assert flaps.counts["imex-agent"] == podflaps.Counts(pods=2)
