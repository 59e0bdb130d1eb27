"""The controller's lines that NVIDIA's tests grep, each at the verbosity NVIDIA logs it.

``test_cd_logging.bats`` expects, from the controller: the startup config at verbosity 0
(``controller manager config``, ``maxNodesPerIMEXDomain``, ``additionalNamespaces:``,
``"MPSSupport":false``), ``Processing added or updated ComputeDomain`` and ``Caches populated``
from verbosity 2 (not at 1), ``Listing and watching`` from 3 (not at 2), and ``Cleanup: perform
for`` at 6. Verbosity N maps to the logging levels of ``infra.logs`` (V1..V3, DEBUG from 4).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap

from compute_domains import controller
from compute_domains.controller import caches, informer, kubeapi, metrics
from compute_domains.controller import controller as app
from compute_domains.infra import backoff, errors, kube, logs


def _settings(**kw: Any) -> controller.ControllerSettings:
    return controller.ControllerSettings(
        namespace="nvidia-dra-driver-gpu",
        daemon=controller.DaemonSettings(image="img:1", max_nodes_per_imex_domain=18),
        **kw,
    )


def _levels(caplog: pytest.LogCaptureFixture, text: str) -> list[int]:
    return [r.levelno for r in caplog.records if text in r.getMessage()]


async def test_startup_line_names_nvidias_config_keys_at_verbosity_0(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-kubeconfig"  # the run stops right after its startup line
    instance = app.Controller(_settings(kube=kube.KubeSettings(kubeconfig=missing)))
    with caplog.at_level(logging.INFO), pytest.raises(errors.ConfigError):
        await instance.run()
    (line,) = [r for r in caplog.records if "controller starting" in r.getMessage()]
    assert line.levelno == logging.INFO
    text = line.getMessage()
    for grepped in (
        "controller manager config",
        "maxNodesPerIMEXDomain=18",
        "additionalNamespaces:",
        '"MPSSupport":false',
        '"ComputeDomainCliques":true',
    ):
        assert grepped in text, grepped


class _OneList:
    """A list that returns one ConfigMap, then a watch that stays open and quiet."""

    class _Listing:
        resourceVersion = "5"

        async def __aiter__(self) -> Any:
            yield ConfigMap.from_dict({"metadata": {"name": "a", "namespace": "ns"}})

    def list(self, *_args: Any, **_kw: Any) -> _Listing:
        return self._Listing()

    async def watch(self, *_args: Any, **_kw: Any) -> Any:
        await asyncio.Event().wait()
        yield  # pragma: no cover - never reached


async def test_informer_says_listing_and_watching_at_3_and_caches_populated_at_2(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inf: informer.Informer[ConfigMap] = informer.Informer(
        kubeapi.Api(cast(AsyncClient, _OneList()), metrics.Metrics()),
        ConfigMap,
        name="configmaps",
        relist_backoff=backoff.Backoff(initial=0.001, maximum=0.01),
    )
    with caplog.at_level(logging.DEBUG):
        task = asyncio.create_task(inf.run())
        try:
            await asyncio.wait_for(inf.synced.wait(), 2)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert _levels(caplog, "Listing and watching") == [logs.V3]
    assert _levels(caplog, "Caches populated") == [logs.V2]
    # klog heads both lines with client-go's reflector.go; NVIDIA's tests grep that from 2 on.
    assert _levels(caplog, "reflector.go") == [logs.V3, logs.V2]


def test_an_added_or_updated_cd_is_announced_at_verbosity_2(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = kubeapi.Api(cast(AsyncClient, object()), metrics.Metrics())
    queued: list[str] = []
    cache = caches.Caches(api, _settings(), lambda uid, _delay: queued.append(uid))
    cd = ConfigMap.from_dict({"metadata": {"name": "cd", "namespace": "default", "uid": "u1"}})
    with caplog.at_level(logging.DEBUG):
        cache.cds._apply("ADDED", cd)
        cache.cds._apply("DELETED", cd)
    assert queued == ["u1", "u1"]
    lines = [r for r in caplog.records if "Processing added or updated" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (logs.V2, "Processing added or updated ComputeDomain: default/cd/u1")
    ]


async def test_each_sweep_says_cleanup_perform_for_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = kubeapi.Api(cast(AsyncClient, object()), metrics.Metrics())
    term = app._Term(api, _settings(), metrics.Metrics(), "me", asyncio.Event())
    with caplog.at_level(logging.DEBUG):
        sweep = asyncio.create_task(term._sweep())
        await asyncio.sleep(0)  # one yield runs a pass up to its wait for the next (300 s)
        sweep.cancel()
        await asyncio.gather(sweep, return_exceptions=True)
    assert _levels(caplog, "Cleanup: perform for") == [logging.DEBUG]
