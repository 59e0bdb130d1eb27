"""Per-instance metrics and the metrics HTTP server."""

from __future__ import annotations

import asyncio

import httpx2 as httpx

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


async def test_server_serves_metrics_and_health() -> None:
    m = metrics.Metrics()
    server = metrics.MetricsServer(m, host="127.0.0.1", port=0)
    task = asyncio.create_task(server.run())
    await asyncio.wait_for(server.started.wait(), 5)
    base = f"http://127.0.0.1:{server.bound_port}"
    try:
        async with httpx.AsyncClient() as http:
            resp = await http.get(f"{base}/metrics")
            assert resp.status_code == 200
            assert "compute_domains_controller_leader" in resp.text
            assert (await http.get(f"{base}/healthz")).text == "ok\n"
            assert (await http.get(f"{base}/readyz")).status_code == 200
            assert (await http.get(f"{base}/nope")).status_code == 404
            assert (await http.post(f"{base}/metrics")).status_code == 405
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
