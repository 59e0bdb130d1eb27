"""Per-instance metrics and the metrics HTTP server."""

from __future__ import annotations

from compute_domains.controller import metrics


def test_instances_do_not_share_a_registry() -> None:
    a, b = metrics.Metrics(), metrics.Metrics()
    a.api_call("get", "nodes", 200)
    assert b'compute_domains_controller_api_requests_total{code="200"' in a.render()
    assert b'compute_domains_controller_api_requests_total{code="200"' not in b.render()


def test_cd_counts_come_from_the_bound_source() -> None:
    m = metrics.Metrics()
    assert b'nvidia_dra_compute_domain_info{status="Ready"} 0.0' in m.render()
    m.bind_cd_status(lambda: metrics.count_statuses(["Ready", "Ready", "NotReady", None]))
    text = m.render().decode()
    assert 'nvidia_dra_compute_domain_info{status="Ready"} 2.0' in text
    assert 'nvidia_dra_compute_domain_info{status="NotReady"} 1.0' in text
    assert 'nvidia_dra_compute_domain_info{status="Unknown"} 1.0' in text
