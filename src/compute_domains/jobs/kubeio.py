"""The job controller's door to the API server: every request translated once, here.

Each call turns lightkube's and httpx's failures into the project's vocabulary with
``infra.kube``'s one classifier, naming the request; callers above this module see only
``kube.KubeError`` subclasses (``NotFound``, ``AlreadyExists``, ...). The policy is the default
table of ``infra.kube.errors``: a command-line tool retries nothing itself, it reports.
Reads that expect absence return None instead of raising ``NotFound``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, TypeVar

from lightkube import AsyncClient

from compute_domains.infra import errors, kube
from compute_domains.infra.kube import watch

R = TypeVar("R")


def _what(obj: Any) -> str:
    meta = getattr(obj, "metadata", None)
    namespace = getattr(meta, "namespace", None)
    name = getattr(meta, "name", None)
    return (
        f"{type(obj).__name__} {namespace}/{name}" if namespace else f"{type(obj).__name__} {name}"
    )


class Api:
    """Translated API requests on one client (the caller owns and closes the client)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def get(self, res: type[R], name: str, *, namespace: str | None = None) -> R | None:
        """The object, or None when it does not exist."""
        try:
            with kube.translated(f"get {res.__name__} {namespace or ''}/{name}".replace(" /", " ")):
                kind: Any = res
                return await self.client.get(kind, name, namespace=namespace)  # type: ignore[no-any-return]
        except kube.NotFound:
            return None

    async def list(
        self, res: type[R], *, namespace: str | None = None, labels: Mapping[str, Any] | None = None
    ) -> list[R]:
        """Every object of ``res`` matching ``labels`` (in ``namespace``, if namespaced)."""
        kind: Any = res
        selector: Any = labels
        with kube.translated(f"list {res.__name__} {namespace or ''}".rstrip()):
            return [
                obj async for obj in self.client.list(kind, namespace=namespace, labels=selector)
            ]

    async def create(self, obj: R) -> R:
        """Create ``obj``; raises ``kube.AlreadyExists`` when its name is taken."""
        with kube.translated(f"create {_what(obj)}"):
            return await self.client.create(obj)  # type: ignore[call-overload,no-any-return]

    async def delete(
        self, res: type[Any], name: str, *, namespace: str, grace_period: int | None = None
    ) -> bool:
        """Delete one object; False when it was gone already."""
        try:
            with kube.translated(f"delete {res.__name__} {namespace}/{name}"):
                await self.client.delete(res, name, namespace=namespace, grace_period=grace_period)
        except kube.NotFound:
            return False
        return True

    async def wait_for(self, res: type[R], name: str, *, namespace: str, timeout_s: float) -> R:
        """The object once it exists, followed by watch (no polling).

        Raises:
            TemporaryError: it did not appear within ``timeout_s``.
        """
        try:
            async with asyncio.timeout(timeout_s):
                async for item in watch.stream(
                    self.client,
                    res,
                    name=f"wait-{name}",
                    namespace=namespace,
                    fields={"metadata.name": name},
                ):
                    found = item.objects if isinstance(item, watch.Listed) else (item.obj,)
                    if isinstance(item, watch.Changed) and item.type == "DELETED":
                        continue
                    if found:
                        return found[0]  # type: ignore[no-any-return]
        except TimeoutError:
            pass
        raise errors.TemporaryError(
            f"{res.__name__} {namespace}/{name} did not appear within {timeout_s:.0f} s"
        )
