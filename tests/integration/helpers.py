"""Watch-based waiting for integration tests (no sleeps, generous timeouts)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

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
            try:
                obj: Any = await client.get(res, name, namespace=namespace)
            except ApiError as err:
                if err.status.code != 404:
                    raise
                obj = None
            if obj is not None and predicate(obj):
                return obj  # type: ignore[no-any-return]
            rv = obj.metadata.resourceVersion if obj is not None else None
            async for _op, obj in client.watch(
                res, namespace=namespace, resource_version=rv, fields={"metadata.name": name}
            ):
                if predicate(obj):
                    return obj  # type: ignore[no-any-return]

    return await asyncio.wait_for(follow(), timeout)
