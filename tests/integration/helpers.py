"""Watch-based waiting for integration tests (no sleeps, generous timeouts)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from compute_domains.sim import state, toolchain

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
            # aclosing: the watch's connection closes on return, not whenever the generator is
            # collected (after this test's event loop closed, an unclosed transport).
            watch = client.watch(
                res, namespace=namespace, resource_version=rv, fields={"metadata.name": name}
            )
            async with contextlib.aclosing(watch) as events:
                async for _op, obj in events:
                    if predicate(obj):
                        return obj  # type: ignore[no-any-return]

    return await asyncio.wait_for(follow(), timeout)


async def wait_gone(
    client: AsyncClient,
    res: Any,
    name: str,
    namespace: str | None = None,
    timeout: float = 60.0,
) -> None:
    """Return once the object is deleted, following a watch from the state read last."""

    async def gone() -> None:
        while True:
            try:
                obj = await client.get(res, name, namespace=namespace)
            except ApiError as err:
                if err.status.code == 404:
                    return
                raise
            watch = client.watch(
                res,
                namespace=namespace,
                fields={"metadata.name": name},
                resource_version=obj.metadata.resourceVersion,
            )
            async with contextlib.aclosing(watch) as events:  # closed on return, not when collected
                async for op, _ in events:
                    if op == "DELETED":
                        return

    await asyncio.wait_for(gone(), timeout)


_REQUEST = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<n>[0-9.e+]+)$", re.M)


async def api_requests(
    toolset: toolchain.Toolset, sim: state.SimPaths, resource: str
) -> Counter[str]:
    """Requests the API server has served for ``resource``, by verb (its own counters).

    Shows how a component reads an object (one GET then a WATCH, or a GET every period)
    without instrumenting the component.
    """
    argv = [str(toolset.path("kubectl")), "--kubeconfig", str(sim.kubeconfig)]
    done = await asyncio.to_thread(
        subprocess.run, [*argv, "get", "--raw", "/metrics"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    counts: Counter[str] = Counter()
    for m in _REQUEST.finditer(done.stdout):
        labels = dict(kv.split("=", 1) for kv in m["labels"].split(","))
        if labels.get("resource") == f'"{resource}"':
            counts[labels["verb"].strip('"')] += int(float(m["n"]))
    return counts
