"""Watch-based waiting for integration tests (no sleeps, generous timeouts)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from lightkube import AsyncClient

T = TypeVar("T")


async def wait_for(
    client: AsyncClient,
    res: type[T],
    name: str,
    predicate: Callable[[T], bool],
    *,
    namespace: str | None = None,
    timeout: float = 60.0,
) -> T:
    """Return the object once ``predicate`` holds, following a watch from the current state."""

    async def follow() -> T:
        while True:
            obj: Any = await client.get(res, name, namespace=namespace)
            if predicate(obj):
                return obj  # type: ignore[no-any-return]
            rv = obj.metadata.resourceVersion
            async for _op, obj in client.watch(
                res, namespace=namespace, resource_version=rv, fields={"metadata.name": name}
            ):
                if predicate(obj):
                    return obj  # type: ignore[no-any-return]

    return await asyncio.wait_for(follow(), timeout)
