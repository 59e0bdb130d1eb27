"""What a starting sim is doing, in one line, so a long ``cdctl sim up`` is seen not to be stuck.

The supervisor records the line in ``state.json`` (``extra.progress``) every few seconds while
it starts: how many simulated nodes have registered, then how many of the driver's DaemonSet
pods are ready while helm waits for them. ``cdctl sim up`` shows it beside its spinner.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.apps_v1 import DaemonSet

logger = logging.getLogger(__name__)

PERIOD_S = 2.0


def nodes_line(registered: int, total: int) -> str:
    """``registered/total nodes registered``."""
    return f"{registered}/{total} nodes registered"


def driver_line(daemonsets: list[dict[str, Any]]) -> str:
    """Ready/desired pods of the driver's DaemonSets (the kubelet plugins), summed."""
    ready = sum(int(d.get("status", {}).get("numberReady") or 0) for d in daemonsets)
    desired = sum(int(d.get("status", {}).get("desiredNumberScheduled") or 0) for d in daemonsets)
    return f"driver installing: {ready}/{desired} DaemonSet pods ready"


def helm_timeout_s(nodes: int) -> int:
    """How long helm may wait for the driver: 300 s, plus 0.25 s per node beyond 600."""
    return 300 + max(0, nodes - 600) // 4


async def report(
    record: Callable[[str], None],
    registered: Callable[[], int],
    total: int,
    admin: Callable[[], AsyncClient] | None,
    namespace: str,
) -> None:
    """Record the nodes' progress, then (once they are all up and ``admin`` is given) the
    driver's, every ``PERIOD_S`` until cancelled."""
    client: AsyncClient | None = None
    try:
        while True:
            count = registered()
            line = nodes_line(count, total)
            if count >= total and admin is not None:
                client = client or admin()
                try:
                    sets = [d.to_dict() async for d in client.list(DaemonSet, namespace=namespace)]
                    line = driver_line(sets)
                except httpx.HTTPError as err:  # progress is best effort
                    logger.debug("progress: could not list DaemonSets: %s", err)
            record(line)
            await asyncio.sleep(PERIOD_S)
    finally:
        if client is not None:
            await client.close()
