"""One resumable list+watch stream of one kind of object: the only list+watch loop we have.

:func:`stream` lists the objects and yields them as one :class:`Listed` snapshot (with the
list's resourceVersion), then watches from that version and yields every :class:`Changed`.

Invariants:
- A watch that ends without an error is resumed from the resourceVersion of the last event it
  delivered (or the list's), so no change between the two watches is lost and nothing is
  re-listed (lightkube's own watch already reconnects this way; fakes and proxies may not).
- An expired version (410 Gone) leads to a fresh list at once; any other failure (API error,
  transport, an undecodable object) to a fresh list after a capped backoff. A consumer therefore
  sees a ``Listed`` snapshot first and again after every re-list, and must treat it as the whole
  truth at that moment (objects missing from it were deleted meanwhile).
- Nothing is polled: between changes the stream waits on the open watch.
- Failures are logged and retried, never raised; the stream ends only when its consumer stops
  iterating or its task is cancelled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

from compute_domains.infra import backoff, logs
from compute_domains.infra.kube import errors, raw

logger = logging.getLogger(__name__)

_DEFAULT_RETRY = backoff.Backoff(initial=0.2, maximum=10.0)


@dataclasses.dataclass(frozen=True, slots=True)
class Listed:
    """A fresh list: every matching object now, and the version the watch starts from."""

    objects: tuple[Any, ...]
    version: str


@dataclasses.dataclass(frozen=True, slots=True)
class Changed:
    """One watch event: ``type`` is ADDED, MODIFIED or DELETED (``obj`` its last state)."""

    type: str
    obj: Any


def _version_of(obj: Any) -> str | None:
    meta = getattr(obj, "metadata", None)
    version = getattr(meta, "resourceVersion", None)
    return str(version) if version else None


async def stream(
    client: Any,
    resource: Any,
    *,
    name: str,
    namespace: str | None = None,
    labels: Mapping[str, Any] | None = None,
    fields: Mapping[str, Any] | None = None,
    watch_timeout_s: int | None = None,
    retry: backoff.Backoff | None = None,
    rng: random.Random | None = None,
    keep: raw.Keep | None = None,
) -> AsyncIterator[Listed | Changed]:
    """List, then watch ``resource`` forever (see the module docstring).

    Args:
        client: the lightkube ``AsyncClient`` (anything with its ``list``/``watch``).
        resource: the lightkube resource class.
        name: names the stream in logs.
        namespace: one namespace, ``"*"`` for all, None for cluster-scoped kinds.
        labels, fields: lightkube label/field selectors.
        watch_timeout_s: the server-side timeout of one watch request.
        retry: backoff between failed attempts.
        rng: jitter source (tests pass a seeded one).
        keep: only the objects it keeps are listed and reported (``raw.watch_kept``: the
            others are not decoded); None keeps all.
    """
    policy = retry or _DEFAULT_RETRY
    selection: dict[str, Any] = {"namespace": namespace, "labels": labels, "fields": fields}
    attempt = 0
    while True:
        try:
            # NVIDIA's (client-go's) words for this moment, with the file klog names.
            logger.log(logs.V3, "informer %s: Listing and watching (reflector.go)", name)
            listing = client.list(resource, chunk_size=500, **selection)
            objects = tuple([obj async for obj in listing])
            version = str(listing.resourceVersion)
            if keep is not None:
                objects = tuple(obj for obj in objects if raw.kept(keep, obj))
            yield Listed(objects, version)
            attempt = 0
            while True:
                if keep is not None:
                    async for event, kept_obj, at in raw.watch_kept(
                        client,
                        resource,
                        keep,
                        resource_version=version,
                        server_timeout=watch_timeout_s,
                        **selection,
                    ):
                        version = at or version
                        if kept_obj is not None:
                            yield Changed(event, kept_obj)
                    logger.debug("informer %s: watch ended; resuming at %s", name, version)
                    continue
                async for event, obj in client.watch(
                    resource,
                    resource_version=version,
                    server_timeout=watch_timeout_s,
                    **selection,
                ):
                    version = _version_of(obj) or version
                    yield Changed(event, obj)
                logger.debug("informer %s: watch ended; resuming at %s", name, version)
        except (*errors.RAW_FAILURES, ValueError) as err:
            # ValueError: lightkube's models raise its subclasses for an undecodable object,
            # which a fresh list may not contain any more.
            failure = (
                errors.translate(err, f"watch {name}") if not isinstance(err, ValueError) else err
            )
            if isinstance(failure, errors.Gone):
                logger.debug("informer %s: watch expired, re-listing", name)
                continue
            delay = policy.delay(attempt, rng)
            attempt += 1
            logger.warning("informer %s: %s; re-listing in %.1fs", name, failure, delay)
            await asyncio.sleep(delay)
