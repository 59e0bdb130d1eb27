"""A long ``sim up`` says what it is doing, and large shapes get time and upstream timings."""

from __future__ import annotations

from compute_domains.sim import lifecycle, progress, topology
from compute_domains.sim.kubelet import config


def test_progress_lines_count_nodes_then_driver_pods() -> None:
    assert progress.nodes_line(500, 1153) == "500/1153 nodes registered"
    sets = [
        {"status": {"numberReady": 700, "desiredNumberScheduled": 1152}},
        {"status": {}},  # a DaemonSet the controller has not counted yet
    ]
    assert progress.driver_line(sets) == "driver installing: 700/1152 DaemonSet pods ready"


def test_helm_waits_longer_only_for_shapes_above_600_nodes() -> None:
    assert progress.helm_timeout_s(18) == 300
    assert progress.helm_timeout_s(600) == 300
    assert progress.helm_timeout_s(1153) == 300 + 553 // 4


def test_large_shapes_get_upstream_node_timings_and_the_kubelets_lease_interval() -> None:
    assert not lifecycle.patient_by_default(topology.Shape(racks=4))  # 72 nodes
    assert lifecycle.patient_by_default(topology.Shape(racks=5))
    assert lifecycle.patient_by_default(topology.Shape(racks=64))
    fast = config.KubeletSettings()
    assert (fast.lease_renew_s, fast.status_update_s) == (2.0, 10.0)
    # A quarter of the grace period each: 8 s fast, 40 s upstream.
    assert config.UPSTREAM_HEARTBEATS["lease_renew_s"] == 40 / 4
