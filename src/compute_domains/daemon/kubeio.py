"""The daemon's few API idioms: follow one named object by watch, and the daemon's error policy.

:func:`follow` yields the object by name (a field selector) now (None while it does not exist)
and after every change (None after a deletion), over ``infra.kube.watch.stream``: the one
list+watch loop, which resumes, re-lists on 410 and backs off on errors. So a consumer sees the
current state first and then each change, possibly repeated after a re-list, and must treat a
snapshot as idempotent. There is no polling. Given the host's shared caches
(``infra.kube.informers``, a virtual node's components), it follows the object in the host's one
cache of its kind instead of opening a watch of its own; what it yields is the same.

:func:`classify` is where the daemon chooses its policy on top of ``infra.kube``'s classifier:
the default table, except that 401/403 are permanent. A daemon whose RBAC is missing can never
register or report readiness; it exits, and its pod's restarts are what an operator sees
(the controller, by contrast, retries a 403 until an administrator fixes its role).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.infra import backoff, errors, kube
from compute_domains.infra.kube import informers, watch


def status_code(err: BaseException) -> int | None:
    """The HTTP status of a failed API call, None for failures without an answer."""
    return kube.code_of(err) or None


def classify(err: BaseException, what: str) -> errors.ComputeDomainsError:
    """A Permanent or Temporary error for a failed API call ``what`` (chain it with ``from``)."""
    return kube.forbidden_is_permanent(kube.translate(err, what))


def version(obj: Any) -> int | None:
    """An object's resourceVersion as an integer (etcd revisions are), None if not numeric."""
    # A generic resource is a dict whose ``.metadata`` decodes all of ObjectMeta on every access,
    # managedFields included (a clique's has a row per daemon): read the raw field instead.
    meta = obj.get("metadata") if isinstance(obj, dict) else getattr(obj, "metadata", None)
    raw: Any = (
        meta.get("resourceVersion")
        if isinstance(meta, dict)
        else getattr(meta, "resourceVersion", None)
    )
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


async def follow(
    client: AsyncClient,
    res: Any,
    name: str,
    *,
    namespace: str,
    retry: backoff.Backoff,
    rng: random.Random | None = None,
    shared: informers.Informers | None = None,
) -> AsyncIterator[Any | None]:
    """Yield object ``namespace/name`` of kind ``res`` now and after every change (None: absent).

    Runs until the consumer stops iterating or the task is cancelled; API failures are logged
    and retried, never raised. With ``shared``, from the host's cache of the kind (a Pod from
    its cache of bound pods).
    """
    if shared is not None:
        cache = (
            informers.bound_pods(shared)
            if res is Pod
            else shared.informer(res, namespace=namespace)
        )
        async for obj in informers.follow(cache, (namespace, name)):
            yield obj
        return
    kind = getattr(res, "__name__", str(res))
    async for item in watch.stream(
        client,
        res,
        name=f"{kind} {namespace}/{name}",
        namespace=namespace,
        fields={"metadata.name": name},
        retry=retry,
        rng=rng,
    ):
        if isinstance(item, watch.Listed):
            yield item.objects[0] if item.objects else None
        else:
            yield None if item.type == "DELETED" else item.obj
