"""The resident agent's few API calls: what its Node asks, and for per-domain serving the
own-DaemonSet check, the CD lookup and its pod's labels.

* :func:`node_wants`: our Node followed by watch (``infra.kube.watch``: list, then watch from
  its version, re-list on 410, back off on errors; no polling), as ``labels.wants_of`` reads
  it, after every event (a deleted Node asks nothing).
* :func:`has_own_daemonset`: whether CD ``X`` has its own per-CD DaemonSet (made in
  perComputeDomain mode: its pod serves ``X``; the agent must not start a second IMEX). A read
  that fails for another reason than 404 is logged, and the CD served.
* :func:`describe`: the CD's name and namespace (its Events and log lines; "" when
  unreadable): from the node host's ComputeDomain cache on a virtual node (no API call; the
  plugins of the host read the same cache), else, or while the cache does not hold it yet, a
  list of the ComputeDomains.
* :func:`label_pod`: the merge patch of our pod's labels (``labels.pod_label_patch``: the CD
  label and the clique ID label in one write, and the IMEX readiness signals that must not stay);
  temporary failures are retried with backoff, a permanent one (RBAC) raised; it returns the
  pod's annotations, which say whether the pod declares the signal.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Iterable

import httpx2 as httpx
from lightkube import ALL_NS, AsyncClient
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from compute_domains.agent import labels
from compute_domains.agent.config import AgentSettings, Wants
from compute_domains.api import names
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.daemon import kubeio
from compute_domains.infra import errors
from compute_domains.infra.kube import informers, watch
from compute_domains.plugin import computedomain

logger = logging.getLogger(__name__)


async def node_wants(
    client: AsyncClient,
    settings: AgentSettings,
    rng: random.Random,
    shared: informers.Informers | None = None,
) -> AsyncIterator[Wants]:
    """What our Node asks, now and after every change (see the module docstring); from the
    host's Node cache when ``shared`` is given (a virtual node)."""
    if shared is not None:
        async for node in informers.follow(informers.nodes(shared), ("", settings.node_name)):
            yield labels.wants_of(labels.node_labels(node))
        return
    async for item in watch.stream(
        client,
        Node,
        name=f"Node {settings.node_name}",
        namespace=None,
        fields={"metadata.name": settings.node_name},
        retry=settings.retry,
        rng=rng,
    ):
        if isinstance(item, watch.Listed):
            node = item.objects[0] if item.objects else None
        else:
            node = None if item.type == "DELETED" else item.obj
        yield labels.wants_of(labels.node_labels(node))


async def has_own_daemonset(
    client: AsyncClient,
    settings: AgentSettings,
    domain_uid: str,
    log: logging.LoggerAdapter[logging.Logger],
) -> bool:
    """Whether CD ``domain_uid`` has its own DaemonSet in the driver namespace."""
    name = names.daemon_object_name(domain_uid)
    try:
        await client.get(DaemonSet, name, namespace=settings.pod_namespace)
    except (httpx.HTTPError, OSError) as err:
        if kubeio.status_code(err) != 404:
            log.warning("cannot read DaemonSet %s (%s); serving the CD", name, err)
        return False
    return True


async def describe(
    client: AsyncClient,
    domain_uid: str,
    log: logging.LoggerAdapter[logging.Logger],
    shared: informers.Informers | None = None,
) -> tuple[str, str]:
    """The CD's name and namespace ("", "" when it cannot be read)."""
    if shared is not None:
        cached = computedomain.cached_name(computedomain.host_cache(shared), domain_uid)
        if cached is not None:
            return cached
    try:
        async for cd in client.list(ComputeDomainResource, namespace=ALL_NS):
            meta = cd.metadata
            if meta is not None and meta.uid == domain_uid:
                return meta.name or "", meta.namespace or ""
    except (httpx.HTTPError, OSError) as err:
        log.info("cannot read ComputeDomain %s: %s", domain_uid, err)
    return "", ""


async def label_pod(
    client: AsyncClient,
    settings: AgentSettings,
    serving: str | None,
    clique_id: str,
    rng: random.Random,
    log: logging.LoggerAdapter[logging.Logger],
    *,
    leaving: Iterable[str] = (),
) -> dict[str, str]:
    """Patch our pod's labels for ``serving`` with ``clique_id`` (None: unlabel; ``leaving``:
    CDs whose readiness signal goes too, ``labels.pod_label_patch``); temporary failures retry.
    Returns the pod's annotations as written (its template's ``imexsignal.DECLARED`` among them).

    Raises:
        errors.PermanentError: the patch is refused for good.
    """
    s = settings
    attempt = 0
    while True:
        try:
            pod = await client.patch(
                Pod,
                s.pod_name,
                labels.pod_label_patch(serving, clique_id, leaving=leaving),
                namespace=s.pod_namespace,
                patch_type=PatchType.MERGE,
            )
            meta = pod.metadata
            return dict((meta.annotations if meta is not None else None) or {})
        except (httpx.HTTPError, OSError) as err:
            classified = kubeio.classify(err, f"label pod {s.pod_namespace}/{s.pod_name}")
            if isinstance(classified, errors.PermanentError):
                raise classified from err
            delay = s.retry.delay(attempt, rng)
            log.info("%s; retrying in %.2fs", classified, delay)
            attempt += 1
            await asyncio.sleep(delay)
