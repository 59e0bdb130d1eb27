"""A republish of the node's ResourceSlice (a holder change: every node of a per-domain
formation) reads neither a list of slices nor the Node: the watch's view and the slice's own
owner reference serve, and each republish is one write."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceSlice

from compute_domains.plugin import devices, resourceslice
from tests.integration.helpers import wait_for
from tests.integration.plugin.conftest import NODES

pytestmark = pytest.mark.integration


class _Counting:
    """The real client, counting the reads a publisher makes (``LIST``/``GET`` per kind)."""

    def __init__(self, inner: AsyncClient, counts: collections.Counter[str]) -> None:
        self._inner = inner
        self._counts = counts

    def list(self, res: Any, *args: Any, **kwargs: Any) -> Any:
        self._counts[f"LIST {res.__name__}"] += 1
        return self._inner.list(res, *args, **kwargs)

    async def get(self, res: Any, *args: Any, **kwargs: Any) -> Any:
        self._counts[f"GET {res.__name__}"] += 1
        return await self._inner.get(res, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_holder_change_is_one_write_without_a_list_or_a_node_read(
    admin: AsyncClient,
) -> None:
    node = NODES[1]
    counts: collections.Counter[str] = collections.Counter()
    holder = {"now": ""}
    publisher = resourceslice.SlicePublisher(
        _Counting(admin, counts),  # type: ignore[arg-type]
        node=node,
        channel_slots=8,
        holder=lambda: holder["now"],
    )
    name = devices.slice_name(node)
    task = asyncio.create_task(publisher.run())
    try:
        async with asyncio.timeout(60):
            await publisher.published.wait()
            while publisher._known is None:  # the watch's first list (its view) is in
                await asyncio.sleep(0.05)
        before = counts.copy()
        for uid in ("cd-one", "cd-two", ""):
            holder["now"] = uid
            publisher.poke()
            await wait_for(
                admin,
                ResourceSlice,
                name,
                lambda s, uid=uid: devices.same_devices(
                    s.to_dict()["spec"]["devices"], devices.slice_devices(8, uid)
                ),
                timeout=30,
            )
        reads = counts - before
        assert reads["LIST ResourceSlice"] == 0, reads
        assert reads["GET Node"] == 0, reads
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
