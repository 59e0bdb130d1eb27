"""A running sim's kube-scheduler ``/metrics``, read with the admin identity (``componentmetrics``).

Against the real control plane: the sim records where kube-scheduler and
kube-controller-manager serve their metrics, the admin's client certificate opens them, and the
page has the counters the formation benchmark reads (``bench.schedevents``: the pods each kind of
cluster event re-queued); a sim that recorded no address says so instead of guessing a port.
"""

from __future__ import annotations

import dataclasses

import pytest

from compute_domains.bench import schedevents
from compute_domains.sim import componentmetrics, errors, state


def test_the_schedulers_counters_are_read_with_the_admin_identity(sim: state.SimPaths) -> None:
    endpoints = sim.endpoints()
    assert endpoints is not None
    assert set(endpoints.metrics) == {"kube-scheduler", "kube-controller-manager"}
    page = componentmetrics.read(endpoints, "kube-scheduler")
    kept = schedevents.keep(page)
    # A counter vector appears with its first sample; the queue gauges are there from the start.
    assert 'scheduler_pending_pods{queue="unschedulable"}' in kept
    assert "process_cpu_seconds_total" in kept
    assert "workqueue_adds_total" in componentmetrics.read(endpoints, "kube-controller-manager")


def test_a_sim_without_a_recorded_address_says_so(sim: state.SimPaths) -> None:
    endpoints = sim.endpoints()
    assert endpoints is not None
    older = dataclasses.replace(endpoints, metrics={})
    with pytest.raises(errors.SimError, match="no /metrics address for kube-scheduler"):
        componentmetrics.read(older, "kube-scheduler")
