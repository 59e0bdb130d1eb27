"""The components' HTTP endpoint: metrics, health paths that can fail, and nothing else."""

from __future__ import annotations

import asyncio

from compute_domains.infra import metrics


async def _get(port: int, request: str) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request.encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data.decode()


async def test_serves_metrics_health_and_refuses_the_rest() -> None:
    healthy = True

    async def check() -> bool:
        return healthy

    endpoint = metrics.HttpEndpoint(
        host="127.0.0.1",
        port=0,
        render=lambda: b"some_metric 1.0\n",
        checks={"/healthz": check, "/readyz": metrics.always_ok},
    )
    task = asyncio.create_task(endpoint.run())
    try:
        await asyncio.wait_for(endpoint.started.wait(), 5)
        assert endpoint.port

        async def get(path: str, verb: str = "GET") -> str:
            assert endpoint.port
            return await _get(endpoint.port, f"{verb} {path} HTTP/1.1\r\nHost: x\r\n\r\n")

        page = await get("/metrics?x=1")
        assert page.startswith("HTTP/1.1 200") and page.endswith("some_metric 1.0\n")
        assert "text/plain; version=" in page
        assert (await get("/healthz")).endswith("\r\n\r\nok\n")
        healthy = False
        assert (await get("/healthz")).startswith("HTTP/1.1 503")
        assert (await get("/readyz")).startswith("HTTP/1.1 200")
        assert (await get("/nope")).startswith("HTTP/1.1 404")
        assert (await get("/metrics", "POST")).startswith("HTTP/1.1 405")
        # Garbage gets a refusal, and the endpoint keeps serving.
        garbage = await _get(endpoint.port, "\x00\r\n\r\n")
        assert garbage.startswith("HTTP/1.1 405"), garbage
        assert (await get("/readyz")).startswith("HTTP/1.1 200")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
