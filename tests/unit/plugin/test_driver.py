"""The kubelet-facing result of a failed prepare carries NVIDIA's words next to ours.

NVIDIA's tests find a bad opaque config in the pod's ``FailedPrepareDynamicResources`` event by
``error preparing devices`` and ``strict decoding error: unknown field "..."``, and in the
plugin log by ``Permanent error`` plus the same decoding text.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.plugin import driver, metrics
from compute_domains.plugin.config import RetrySettings
from tests.unit.plugin import fakes

CD = "aaaaaaaa-0000-4000-8000-00000000000a"


class _OneClaim:
    """Answers ``get`` with one ResourceClaim, as the API server would."""

    def __init__(self, status: dict[str, Any], uid: str, namespace: str, name: str) -> None:
        self._obj = ResourceClaim.from_dict(
            {
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": uid,
                    "resourceVersion": "7",
                },
                "spec": {},
                "status": status,
            }
        )

    async def get(self, _kind: object, name: str, *, namespace: str) -> ResourceClaim:
        assert self._obj.metadata is not None
        assert (namespace, name) == (self._obj.metadata.namespace, self._obj.metadata.name)
        return self._obj


async def test_a_bad_opaque_config_fails_with_nvidias_words_in_event_and_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad = fakes.claim(
        "u1",
        [fakes.result("channel-0")],
        [fakes.config_entry(fakes.channel_config(CD, unexpectedField="foo"))],
        namespace="default",
        name="batssuite-rc-bad-opaque-config",
    )
    domains = fakes.FakeDomains(fakes.compute_domain(CD, namespace="default"))
    client = _OneClaim(dict(bad.status), "u1", "default", "batssuite-rc-bad-opaque-config")
    plugin = driver.Driver(
        client=cast(AsyncClient, client),
        device_state=fakes.device_state(tmp_path, domains),
        node=fakes.NODE,
        retry=RetrySettings(budget_s=2.0),
        metrics=metrics.PluginMetrics(fakes.NODE),
    )
    ref = driver.ClaimRef(namespace="default", name="batssuite-rc-bad-opaque-config", uid="u1")
    with caplog.at_level(logging.INFO):
        result = (await plugin.prepare([ref]))["u1"]
    strict = 'strict decoding error: unknown field "unexpectedField"'
    assert result.error.startswith(
        "error preparing devices for claim default/batssuite-rc-bad-opaque-config (u1): "
    )
    assert strict in result.error
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("Permanent error" in line and strict in line for line in logged), logged
