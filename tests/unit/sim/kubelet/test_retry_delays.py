"""The simulated kubelet's retry delays: volumes back off from 500 ms like the real kubelet's
volume operations; DRA preparation from its own first delay."""

from __future__ import annotations

import asyncio
import logging
import types
from typing import Any

import pytest

from compute_domains.sim.kubelet import pods, volumes
from compute_domains.sim.kubelet.config import KubeletSettings


class _Recorder:
    async def pod(self, *args: Any) -> None:
        return None


def _worker(settings: KubeletSettings) -> Any:
    fake = types.SimpleNamespace(
        _svc=types.SimpleNamespace(settings=settings, recorder=_Recorder()),
        _log=logging.getLogger("test"),
        _records=[],
        pod=None,
        changed=lambda: None,
    )
    return fake


@pytest.mark.parametrize(
    ("reason", "first_delay", "expected"),
    [
        ("FailedMount", 0.5, [0.5, 1.0, 2.0]),
        ("FailedPrepareDynamicResources", None, [1.0, 2.0, 4.0]),
    ],
)
async def test_retry_delays_double_from_the_first(
    monkeypatch: pytest.MonkeyPatch, reason: str, first_delay: float | None, expected: list[float]
) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    failures = iter(range(3))

    async def what() -> str:
        if next(failures, None) is not None:
            raise volumes.VolumeError("token refused")
        return "done"

    settings = KubeletSettings()
    assert settings.volume_retry_s == 0.5
    worker = _worker(settings)
    kwargs = {} if first_delay is None else {"first_delay": settings.volume_retry_s}
    got = await pods.PodWorker._retrying(worker, what, reason, "waiting", **kwargs)
    assert got == "done"
    assert slept == expected
