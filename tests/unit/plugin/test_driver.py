"""The kubelet-facing result of a failed prepare carries NVIDIA's words next to ours.

NVIDIA's tests find a bad opaque config in the pod's ``FailedPrepareDynamicResources`` event by
``error preparing devices`` and ``strict decoding error: unknown field "..."``, and in the
plugin log by ``Permanent error`` plus the same decoding text.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, cast

import httpx2 as httpx
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

    async def raw(self, namespace: str, name: str) -> bytes:
        """The claim's JSON, as the plugin reads it (``Driver``'s ``read_claim``)."""
        return json.dumps((await self.get(None, name, namespace=namespace)).to_dict()).encode()


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
        read_claim=client.raw,
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


class _Claims:
    """Answers ``get`` with each claim's ResourceClaim; one name fails as ``failure`` says."""

    def __init__(self, claims: list[Any], failing: str, failure: Exception) -> None:
        self._objs = {
            c.name: ResourceClaim.from_dict(
                {
                    "metadata": {
                        "name": c.name,
                        "namespace": c.namespace,
                        "uid": c.uid,
                        "resourceVersion": "7",
                    },
                    "spec": {},
                    "status": dict(c.status),
                }
            )
            for c in claims
        }
        self._failing = failing
        self._failure = failure

    async def get(self, _kind: object, name: str, *, namespace: str) -> ResourceClaim:
        if name == self._failing:
            raise self._failure
        return self._objs[name]

    async def raw(self, namespace: str, name: str) -> bytes:
        """The claim's JSON, as the plugin reads it (``Driver``'s ``read_claim``)."""
        return json.dumps((await self.get(None, name, namespace=namespace)).to_dict()).encode()


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (httpx.ConnectError("connection refused"), "connection refused"),
        (RuntimeError("a bug in one claim's path"), "a bug in one claim's path"),
    ],
)
async def test_one_claims_failing_api_call_fails_only_that_claim(
    tmp_path: Path, failure: Exception, expected: str
) -> None:
    claims = [
        fakes.claim(
            uid, [fakes.result(f"channel-{i}")], [fakes.config_entry(fakes.channel_config(CD))]
        )
        for i, uid in enumerate(["u1", "u2", "u3"])
    ]
    domains = fakes.FakeDomains(fakes.compute_domain(CD))
    domains.make_ready(CD)
    api = _Claims(claims, "claim-u2", failure)
    plugin = driver.Driver(
        client=cast(AsyncClient, api),
        read_claim=api.raw,
        device_state=fakes.device_state(tmp_path, domains),
        node=fakes.NODE,
        retry=RetrySettings(budget_s=0.6, initial_backoff_s=0.05, max_backoff_s=0.1),
        metrics=metrics.PluginMetrics(fakes.NODE),
    )
    refs = [driver.ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]
    results = await plugin.prepare(refs)
    assert sorted(results) == ["u1", "u2", "u3"]
    assert [d.device_name for d in results["u1"].devices] == ["channel-0"]
    assert [d.device_name for d in results["u3"].devices] == ["channel-2"]
    assert (results["u1"].error, results["u3"].error) == ("", "")
    assert results["u2"].devices == ()
    assert results["u2"].error.startswith("error preparing devices for claim ns/claim-u2 (u2): ")
    assert expected in results["u2"].error


async def test_a_repeated_key_fails_the_claim_only_in_our_own_parameters(tmp_path: Path) -> None:
    other = {"source": "FromClaim", "opaque": {"driver": "gpu.example.com", "parameters": {}}}
    ours = fakes.config_entry(fakes.channel_config(CD))
    claims = {
        "u1": fakes.claim("u1", [fakes.result("channel-0")], [other, ours]),
        "u2": fakes.claim("u2", [fakes.result("channel-1")], [ours]),
    }
    bodies = {
        # Another driver's parameters repeat a key: not ours to judge.
        "claim-u1": ('"parameters": {}', '"parameters": {"k": 1, "k": 2}'),
        # Our own repeat domainID; the last value is a valid CD, but it is refused all the same.
        "claim-u2": (f'"domainID": "{CD}"', f'"domainID": "x", "domainID": "{CD}"'),
    }

    async def read(namespace: str, name: str) -> bytes:
        c = claims[name.removeprefix("claim-")]
        meta = {"name": name, "namespace": namespace, "uid": c.uid, "resourceVersion": "7"}
        text = json.dumps({"metadata": meta, "status": dict(c.status)})
        old, new = bodies[name]
        assert text.count(old) == 1
        return text.replace(old, new).encode()

    domains = fakes.FakeDomains(fakes.compute_domain(CD))
    domains.make_ready(CD)
    plugin = driver.Driver(
        client=cast(AsyncClient, None),
        read_claim=read,
        device_state=fakes.device_state(tmp_path, domains),
        node=fakes.NODE,
        retry=RetrySettings(budget_s=2.0),
        metrics=metrics.PluginMetrics(fakes.NODE),
    )
    results = await plugin.prepare(
        [driver.ClaimRef(namespace="ns", name=f"claim-{u}", uid=u) for u in claims]
    )
    assert results["u1"].error == "" and [d.device_name for d in results["u1"].devices] == [
        "channel-0"
    ]
    assert results["u2"].devices == ()
    assert 'strict decoding error: duplicate field "domainID"' in results["u2"].error
