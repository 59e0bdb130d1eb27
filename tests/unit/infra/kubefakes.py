"""A scripted list/watch client: answers as an API server having a bad day would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from lightkube.core.exceptions import ApiError
from lightkube.core.internal_models import meta_v1
from lightkube.resources.core_v1 import ConfigMap


def cm(
    name: str, rv: str, label: str | None = None, ns: str = "ns", data: str | None = None
) -> ConfigMap:
    """A ConfigMap with a resourceVersion, an optional ``cd`` label and optional data."""
    labels = {"cd": label} if label else None
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels}
    }
    if data is not None:
        body["data"] = {"node": data}
    return ConfigMap.from_dict(body)


def api_error(code: int, reason: str = "", message: str = "") -> ApiError:
    """The error lightkube raises for an HTTP status."""
    return ApiError(status=meta_v1.Status(code=code, reason=reason, message=message))


class Listing:
    """One list answer: raises, or yields objects and then carries a resourceVersion."""

    def __init__(self, step: Any) -> None:
        self._step = step
        self.resourceVersion = ""

    async def __aiter__(self) -> AsyncIterator[ConfigMap]:
        if isinstance(self._step, Exception):
            raise self._step
        items, self.resourceVersion = self._step
        for item in items:
            yield item


class ScriptedClient:
    """Answers list and watch calls from a script; records what was asked.

    A watch script ends with "END" to close the watch cleanly; otherwise it stays open and
    quiet after its last step, as a real watch between changes does.
    """

    def __init__(self, lists: list[Any], watches: list[list[Any]]) -> None:
        self.lists = lists
        self.watches = watches
        self.list_calls = 0
        self.watch_versions: list[str] = []

    def list(self, *_args: Any, **_kw: Any) -> Listing:
        self.list_calls += 1
        return Listing(self.lists.pop(0))

    async def watch(self, *_args: Any, resource_version: str, **_kw: Any) -> AsyncIterator[Any]:
        self.watch_versions.append(resource_version)
        script = self.watches.pop(0) if self.watches else []
        for step in script:
            if step == "END":
                return
            if isinstance(step, Exception):
                raise step
            yield step
        await asyncio.Event().wait()
