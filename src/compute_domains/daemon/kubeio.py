"""The daemon's few API idioms: follow one named object by watch, classify API errors.

:func:`follow` lists the object by name (a field selector), yields it (None while it does not
exist), then watches from the list's resourceVersion and yields every new state (None after a
deletion). A watch that fails is re-listed after a backoff; an expired version (410) is re-listed
at once. So a consumer sees the current state first and then each change, possibly repeated after
a re-list, and must treat a snapshot as idempotent. There is no polling: between changes the
generator waits on the watch stream.

:func:`classify` is the daemon's one translation of a lightkube/httpx failure into our
vocabulary: 409 (conflict, already exists), 429, 5xx, timeouts and connection errors are
temporary; anything else (403 missing RBAC, 422 invalid) is permanent.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from compute_domains.infra import backoff, errors

logger = logging.getLogger(__name__)


def status_code(err: BaseException) -> int | None:
    """The HTTP status of an API error, None for other errors."""
    return err.status.code if isinstance(err, ApiError) else None


def classify(err: BaseException, what: str) -> errors.ComputeDomainsError:
    """A Permanent or Temporary error for a failed API call ``what`` (chain it with ``from``)."""
    code = status_code(err)
    if isinstance(err, ApiError):
        message = f"{what}: {code} {err.status.reason or ''} {err.status.message or ''}".strip()
        if code in (409, 429) or (code is not None and code >= 500):
            return errors.TemporaryError(message)
        return errors.PermanentError(message)
    return errors.TemporaryError(f"{what}: {type(err).__name__}: {err}")


def version(obj: Any) -> int | None:
    """An object's resourceVersion as an integer (etcd revisions are), None if not numeric."""
    try:
        return int(obj.metadata.resourceVersion)
    except (AttributeError, TypeError, ValueError):
        return None


async def follow(
    client: AsyncClient,
    res: Any,
    name: str,
    *,
    namespace: str,
    retry: backoff.Backoff,
    rng: random.Random | None = None,
) -> AsyncIterator[Any | None]:
    """Yield object ``namespace/name`` of kind ``res`` now and after every change (None: absent).

    Runs until the consumer stops iterating or the task is cancelled; API failures are logged
    and retried, never raised.
    """
    fields: dict[str, Any] = {"metadata.name": name}
    attempt = 0
    while True:
        try:
            listing = client.list(res, namespace=namespace, fields=fields)
            items = [item async for item in listing]
            yield items[0] if items else None
            watch = client.watch(
                res, namespace=namespace, fields=fields, resource_version=listing.resourceVersion
            )
            async for op, obj in watch:
                attempt = 0
                yield None if op == "DELETED" else obj
        except (httpx.HTTPError, OSError) as err:
            if status_code(err) == 410:
                logger.debug("watch of %s/%s expired; re-listing", namespace, name)
                continue
            delay = retry.delay(attempt, rng)
            attempt += 1
            logger.warning(
                "watch of %s %s/%s failed (%s); re-listing in %.1fs",
                getattr(res, "__name__", res),
                namespace,
                name,
                classify(err, "watch"),
                delay,
            )
            await asyncio.sleep(delay)
