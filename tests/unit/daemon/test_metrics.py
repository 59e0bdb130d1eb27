"""The daemon's metrics: its own registry, the start-up steps and its own IMEX checks."""

from __future__ import annotations

from compute_domains.daemon import metrics


def test_steps_and_checks_are_exposed_per_instance() -> None:
    m, other = metrics.DaemonMetrics(), metrics.DaemonMetrics()
    m.step("registered", 2.5)
    m.imex_check(False)
    m.imex_check(True)
    text = m.render().decode()
    assert 'compute_domains_daemon_startup_step_seconds{step="registered"} 2.5' in text
    assert 'compute_domains_daemon_imex_checks_total{result="not_ready"} 1.0' in text
    assert 'compute_domains_daemon_imex_checks_total{result="ready"} 1.0' in text
    assert "compute_domains_daemon_imex_ready 1.0" in text
    # No global registry: a second instance starts empty.
    assert "registered" not in other.render().decode()
