"""The resident agent's CD lookup (``agent.kubeops.describe``) on a virtual node reads the node
host's ComputeDomain cache, the one its plugins read: no list of every ComputeDomain per CD
start (4,608 of them in a 4,608-node per-domain formation); a CD the cache does not hold yet,
and an agent without a host cache, still find it by a list."""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

import pytest
from lightkube import AsyncClient

from compute_domains.agent import kubeops
from compute_domains.infra.kube import informers
from compute_domains.plugin import computedomain

pytestmark = pytest.mark.integration

LOG = logging.LoggerAdapter(logging.getLogger(__name__), {})


class _Counting:
    """The real client, counting its lists."""

    def __init__(self, inner: AsyncClient, counts: collections.Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    def list(self, res: Any, *args: Any, **kwargs: Any) -> Any:
        self._counts["LIST"] += 1
        return self._inner.list(res, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_the_host_cache_names_the_cd_without_a_list(
    admin: AsyncClient, compute_domain: Any
) -> None:
    uid, name, ns = (
        compute_domain.metadata.uid,
        compute_domain.metadata.name,
        compute_domain.metadata.namespace,
    )
    shared = informers.Informers(admin)
    domains = computedomain.host_cache(shared)
    task = asyncio.create_task(shared.run())
    try:
        async with asyncio.timeout(30):
            await domains.synced.wait()
            while computedomain.cached_name(domains, uid) is None:
                await asyncio.sleep(0.05)  # the watch delivers the CD made before it started
        counts: collections.Counter[str] = collections.Counter()
        counting = _Counting(admin, counts)
        got = await kubeops.describe(counting, uid, LOG, shared)  # type: ignore[arg-type]
        assert got == (name, ns)
        assert counts["LIST"] == 0

        # Not in the cache (a CD made a moment ago, here one that does not exist): a list.
        assert await kubeops.describe(counting, "no-such-uid", LOG, shared) == ("", "")  # type: ignore[arg-type]
        assert counts["LIST"] == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_without_a_host_cache_the_cd_is_found_by_a_list(
    admin: AsyncClient, compute_domain: Any
) -> None:
    counts: collections.Counter[str] = collections.Counter()
    got = await kubeops.describe(_Counting(admin, counts), compute_domain.metadata.uid, LOG)  # type: ignore[arg-type]
    assert got == (compute_domain.metadata.name, compute_domain.metadata.namespace)
    assert counts["LIST"] == 1
