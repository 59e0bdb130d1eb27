"""The controller's door to the API server: counted requests, translated failures.

Every request the controller makes (except watches, which its informers run through
``infra.kube.cache``) goes through ``Api``, which counts it in metrics and turns failures into
the project's error vocabulary with ``infra.kube``'s one classifier. The controller's policy on
top of that classifier, chosen here: it keeps the default table, so 403 (missing RBAC), 401,
409, 429, 5xx and transport errors are retried with backoff by the work queue (an administrator
may fix the role while the controller waits), and 400/422/404/other 4xx fail the reconcile
permanently. Callers that expect absence get None/False for a 404 instead.

Also here: the finalizer helpers, shared by reconcile and teardown, and the eviction of a pod
by UID (``replacer``).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

from lightkube import AsyncClient
from lightkube.core.resource import Resource
from lightkube.models.meta_v1 import DeleteOptions, ObjectMeta, Preconditions
from lightkube.resources.core_v1 import Pod, PodEviction
from lightkube.types import CascadeType, PatchType

from compute_domains.controller import metrics
from compute_domains.infra import kube

R = TypeVar("R")
ALL_NAMESPACES: Final = "*"


NotFound = kube.NotFound
AlreadyExists = kube.AlreadyExists
Conflict = kube.Conflict
Invalid = kube.Invalid


def _resource_name(res: type[Resource] | Resource) -> str:
    info = (res if isinstance(res, type) else type(res))._api_info
    return f"{info.plural}/{info.action}" if info.action else str(info.plural)


def _code(err: BaseException) -> int | str:
    return kube.code_of(err) or "error"


def now() -> datetime.datetime:
    """The current wall-clock time, timezone-aware (UTC), for timestamps we write."""
    return datetime.datetime.now(datetime.UTC)


class Api:
    """Counted, classified API requests on one client."""

    def __init__(self, client: AsyncClient, meter: metrics.Metrics) -> None:
        self.client = client
        """The raw client (watches use it directly)."""
        self._metrics = meter

    async def _call(self, verb: str, res: Any, what: str, coro: Any) -> Any:
        resource = _resource_name(res)
        try:
            result = await coro
        except kube.RAW_FAILURES as err:
            self._metrics.api_call(verb, resource, _code(err))
            raise kube.translate(err, f"{verb} {resource} {what}") from err
        self._metrics.api_call(verb, resource, 200)
        return result

    async def get(self, res: type[R], name: str, *, namespace: str | None = None) -> R | None:
        """The object, or None when it does not exist."""
        try:
            return await self._call(  # type: ignore[no-any-return]
                "get", res, f"{namespace}/{name}", self.client.get(res, name, namespace=namespace)
            )
        except NotFound:
            return None

    async def list(
        self,
        res: type[R],
        *,
        namespace: str | None = None,
        labels: Mapping[str, Any] | None = None,
    ) -> list[R]:
        """Every object matching (``namespace=ALL_NAMESPACES`` for all namespaces)."""

        async def collect() -> list[R]:
            out: list[R] = []
            kind: Any = res
            selector: Any = labels
            async for obj in self.client.list(
                kind, namespace=namespace, labels=selector, chunk_size=500
            ):
                out.append(obj)
            return out

        return await self._call("list", res, f"{namespace}", collect())  # type: ignore[no-any-return]

    async def create(self, obj: R) -> R:
        """Create ``obj``; raises ``AlreadyExists`` if the name is taken."""
        meta = getattr(obj, "metadata", None)
        what = f"{getattr(meta, 'namespace', None)}/{getattr(meta, 'name', None)}"
        return await self._call("create", obj, what, self.client.create(obj))  # type: ignore[no-any-return]

    async def replace(self, obj: R) -> R:
        """Replace ``obj`` (optimistic concurrency through its resourceVersion)."""
        meta = getattr(obj, "metadata", None)
        what = f"{getattr(meta, 'namespace', None)}/{getattr(meta, 'name', None)}"
        return await self._call("replace", obj, what, self.client.replace(obj))  # type: ignore[no-any-return]

    async def patch(
        self,
        res: type[R],
        name: str,
        body: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
    ) -> R:
        """Patch the object; raises ``NotFound`` if it is gone."""
        call = self.client.patch(  # type: ignore[call-overload]
            res, name, body, namespace=namespace, patch_type=patch_type
        )
        return await self._call("patch", res, f"{namespace}/{name}", call)  # type: ignore[no-any-return]

    async def delete(
        self, res: type[Resource], name: str, *, namespace: str | None = None, orphan: bool = False
    ) -> bool:
        """Delete (background propagation; ``orphan``: the dependents stay, their owner
        references to it removed); False when it was already gone."""
        kind: Any = res
        cascade = CascadeType.ORPHAN if orphan else CascadeType.BACKGROUND
        call = self.client.delete(kind, name, namespace=namespace, cascade=cascade)
        try:
            await self._call("delete", res, f"{namespace}/{name}", call)
        except NotFound:
            return False
        return True

    async def evict(self, name: str, *, namespace: str, uid: str) -> bool:
        """Delete pod ``name`` through the Eviction API (PodDisruptionBudgets apply) if it is
        still the pod with ``uid`` (a precondition: its replacement is never deleted); False
        when it was already gone. A changed UID raises ``Conflict``, a budget (429) ``Unavailable``
        (both temporary: kube.KubeError)."""
        body = PodEviction(
            metadata=ObjectMeta(name=name, namespace=namespace),
            deleteOptions=DeleteOptions(preconditions=Preconditions(uid=uid)),
        )
        call = self.client.create(body, name, namespace=namespace)
        try:
            await self._call("create", Pod, f"{namespace}/{name} eviction", call)
        except NotFound:
            return False
        return True

    async def remove_finalizer(
        self, res: type[Resource], name: str, finalizer: str, *, namespace: str | None = None
    ) -> None:
        """Drop ``finalizer`` from the object, keeping every other one; absent is fine.

        Uses the read resourceVersion as a precondition, so a concurrent change of the list
        surfaces as ``Conflict`` instead of being overwritten.
        """
        obj: Any = await self.get(res, name, namespace=namespace)
        if obj is None or finalizer not in (obj.metadata.finalizers or []):
            return
        rest = [f for f in obj.metadata.finalizers if f != finalizer]
        body = {
            "metadata": {
                "finalizers": rest or None,
                "resourceVersion": obj.metadata.resourceVersion,
            }
        }
        try:
            await self.patch(res, name, body, namespace=namespace)
        except NotFound:
            return

    async def add_finalizer(self, obj: R, finalizer: str) -> R:
        """Append ``finalizer`` to the object's list (precondition: its resourceVersion)."""
        meta: Any = getattr(obj, "metadata")  # noqa: B009 (R is any resource type)
        present = list(meta.finalizers or [])
        if finalizer in present:
            return obj
        body = {
            "metadata": {
                "finalizers": [*present, finalizer],
                "resourceVersion": meta.resourceVersion,
            }
        }
        return await self.patch(type(obj), meta.name, body, namespace=meta.namespace)
