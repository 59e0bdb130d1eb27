"""The controller's clique writer: assign indices to daemons, prune entries of dead daemons.

The only place where the controller writes ComputeDomainClique entries (docs/decisions/0009;
the rules and patches are ``cliqueindex``'s). It runs beside the reconcile workers with a work
queue of its own, keyed by CD UID, so a daemon's slot never waits behind a status write: every
change of a daemon pod or a clique of the CD enqueues the CD (after ``index_coalesce_s``, so a
burst of daemons that label their pods together becomes one write), and the sweep enqueues
every CD. One pass over a CD, from the shared caches (which hold our own writes):

1. for each clique ID among the CD's candidate pods (up to ``CONCURRENT_CLIQUES`` cliques at a
   time: each is its own object): create the clique with their entries when
   it does not exist, else patch the entries that are missing, carry another IP, or (a resident
   agent's pod that declares the IMEX readiness signal) another status than its signal says
   (``cliqueindex.patch_ops``, no resourceVersion). A failed ``test`` (422: the entries moved, a
   removal or another writer) re-reads the clique and plans again, a few times, then the pass
   is retried with backoff. Nodes that found no free slot are logged; the CD's ``CliqueFull``
   Event comes from the status sync and the pod's from the daemon;
2. entries whose node runs no daemon pod of the CD any more are removed, but only after a live
   list of the CD's daemon pods confirms it (the cache may lag behind a pod just created), by
   a patch that tests each removed entry's node and IP.

Nothing is assigned for a UID without a cached CD (its leftovers are the teardown's), and no
clique is created for a CD being deleted: its teardown deletes the cliques while the daemon pods
may still look alive for a moment, and must not find them made again. A per-clique CD has no
cliques of its own (the shared registries ``shared-imex.<cliqueID>`` serve it; their entries
are the agents' own, ``api.sharedimex``): nothing is assigned or pruned for it, even if an
agent pod carries its label, and a registry is never written here (it carries no CD label, so
no CD's index lookup ever finds one; a clique named like one is skipped all the same).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from compute_domains.api import names, sharedimex
from compute_domains.api.clique import (
    ComputeDomainClique,
    ComputeDomainCliqueResource,
)
from compute_domains.api.computedomain import DecodeError, Readiness
from compute_domains.api.sharedimex import Scope
from compute_domains.controller import (
    caches,
    cliqueindex,
    config,
    kubeapi,
    scope,
    status,
)
from compute_domains.infra import errors, workqueue

logger = logging.getLogger(__name__)

ATTEMPTS = 5
"""Plans per clique and pass before the pass is retried with backoff."""
CONCURRENT_CLIQUES = 16
"""Cliques of one CD written at the same time in a pass: each is its own object, and a pass
that wrote them one after another waited one API round trip per clique (256 of them at 4,608
nodes), while the entries of the last cliques waited too."""


class IndexAssigner:
    """Keeps every CD's clique entries in line with its daemon pods (see the module docstring)."""

    def __init__(
        self, *, api: kubeapi.Api, cache: caches.Caches, settings: config.ControllerSettings
    ) -> None:
        self._api = api
        self._cache = cache
        self._settings = settings
        self.queue: workqueue.WorkQueue[str] = workqueue.WorkQueue(retry_backoff=settings.retry)
        self._settled: dict[str, tuple[Any, tuple[Any, ...]]] = {}
        """Clique name → the cached object and the candidates a pass last found nothing to write
        for: a later pass with both unchanged skips that clique (at 4,608 nodes a pass planned
        all 256 cliques, about 0.2 s of CPU, every time one pod changed)."""

    def enqueue(self, domain_uid: str) -> None:
        """Look at CD ``domain_uid`` soon."""
        self.queue.add(domain_uid, self._settings.index_coalesce_s)

    async def run(self) -> None:
        """Work the queue until cancelled (start once the caches are filled)."""
        while True:
            domain_uid = await self.queue.get()
            try:
                await self.sync(domain_uid)
                self.queue.forget(domain_uid)
            except errors.ComputeDomainsError as err:
                delay = self.queue.retry(
                    domain_uid, err.delay if isinstance(err, errors.TemporaryError) else None
                )
                logger.warning(
                    "clique indices of %s: %s; retrying in %.2fs", domain_uid, err, delay
                )
            except Exception:
                self.queue.retry(domain_uid)
                logger.exception("clique indices of %s failed unexpectedly", domain_uid)
            finally:
                self.queue.done(domain_uid)

    async def sync(self, domain_uid: str) -> None:
        """One pass over CD ``domain_uid``: assign, then prune.

        Raises:
            errors.ComputeDomainsError: a write failed (retry later).
        """
        cd = self._cache.cd(domain_uid)
        if cd is None or scope.fixed_scope(cd.metadata.annotations) is Scope.PER_CLIQUE:
            for name in [k for k in self._settled if k.startswith(f"{domain_uid}.")]:
                del self._settled[name]
            return
        log = {"cd": f"{cd.metadata.namespace}/{cd.metadata.name}"}
        pods = self._cache.pods.by_index(caches.CD_INDEX, domain_uid)
        owner = self._daemonset_ref(domain_uid)
        deleting = cd.metadata.deletionTimestamp is not None
        gate = asyncio.Semaphore(CONCURRENT_CLIQUES)

        async def assign(clique_id: str, members: list[cliqueindex.Candidate]) -> None:
            async with gate:
                await self._assign(domain_uid, clique_id, members, owner, log, create=not deleting)

        work = sorted(cliqueindex.candidates(pods).items())
        outcomes = await asyncio.gather(*(assign(c, m) for c, m in work), return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        for other in failed[1:]:
            logger.warning("clique indices of %s: %s", domain_uid, other, extra=log)
        if failed:
            raise failed[0]
        pod_nodes = {p.spec.nodeName for p in pods if p.spec is not None and p.spec.nodeName}
        await self._prune(domain_uid, pod_nodes, log)

    def _daemonset_ref(self, domain_uid: str) -> dict[str, str] | None:
        found = self._cache.daemonsets.by_index(caches.CD_INDEX, domain_uid)
        if not found or found[0].metadata is None or not found[0].metadata.uid:
            return None
        meta = found[0].metadata
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": meta.name or "",
            "uid": meta.uid or "",
        }

    def _decode(self, raw: Any) -> ComputeDomainClique:
        return self._cache.clique_of(raw)

    async def _fresh(self, name: str) -> ComputeDomainClique | None:
        raw: Any = await self._api.get(
            ComputeDomainCliqueResource, name, namespace=self._settings.namespace
        )
        if raw is None:
            return None
        self._cache.cliques.observe(raw)
        return ComputeDomainClique.from_resource(raw)

    async def _assign(
        self,
        domain_uid: str,
        clique_id: str,
        members: list[cliqueindex.Candidate],
        owner: dict[str, str] | None,
        log: dict[str, str],
        *,
        create: bool,
    ) -> None:
        ns = self._settings.namespace
        max_nodes = self._settings.daemon.max_nodes_per_imex_domain
        name = names.clique_object_name(domain_uid, clique_id)
        raw_cached = self._cache.cliques.get(ns, name)
        asked = (*members, tuple(sorted((owner or {}).items())), create)
        settled = self._settled.get(name)
        if raw_cached is not None and settled is not None:
            if settled[0] is raw_cached and settled[1] == asked:
                return  # nothing changed since a pass found nothing to write here
        try:
            current = None if raw_cached is None else self._decode(raw_cached)
        except DecodeError as err:
            raise errors.PermanentError(f"clique {ns}/{name} is malformed: {err}") from err
        for attempt in range(ATTEMPTS):
            base = current or ComputeDomainClique.new(
                domain_uid=domain_uid, clique_id=clique_id, namespace=ns
            )
            if base.domain_uid != domain_uid:
                logger.warning("clique %s is labelled for CD %r; not ours", name, base.domain_uid)
                return
            plan = cliqueindex.assigned(base, members, max_nodes, owner)
            if plan.full:
                logger.warning(
                    "clique %s is full (%d slots): no index for %s",
                    name,
                    max_nodes,
                    ", ".join(plan.full),
                    extra=log,
                )
            try:
                if current is None:
                    if not plan.clique.daemons or not create:
                        return
                    raw = await self._api.create(
                        cliqueindex.for_creation(plan.clique).to_resource()
                    )
                else:
                    ops = cliqueindex.patch_ops(current, plan.clique)
                    if not ops:
                        if attempt == 0 and raw_cached is not None:
                            self._settled[name] = (raw_cached, asked)
                        return
                    raw = await self._api.patch(
                        ComputeDomainCliqueResource,
                        name,
                        ops,
                        namespace=ns,
                        patch_type=PatchType.JSON,
                    )
            except (kubeapi.AlreadyExists, kubeapi.Conflict, kubeapi.NotFound):
                current = await self._fresh(name)
                continue
            except errors.PermanentError as err:
                if not isinstance(err, kubeapi.Invalid):
                    raise
                current = await self._fresh(name)  # a test failed: the entries moved
                continue
            self._cache.cliques.observe(raw)
            written = self._decode(raw)  # once: the next pass finds this version decoded
            self._log_changes(name, current, written, log)
            _log_signals(name, current, written, members, log)
            return
        raise errors.TemporaryError(f"clique {ns}/{name} kept changing under {ATTEMPTS} plans")

    @staticmethod
    def _log_changes(
        name: str,
        before: ComputeDomainClique | None,
        after: ComputeDomainClique,
        log: dict[str, str],
    ) -> None:
        for entry in after.daemons:
            old = before.daemon(entry.node_name) if before is not None else None
            if old is None:
                logger.info(
                    "clique %s: node %s gets index %d (%s)",
                    name,
                    entry.node_name,
                    entry.index,
                    entry.ip_address,
                    extra=log,
                )
            elif old.ip_address != entry.ip_address:
                logger.info(
                    "clique %s: node %s keeps index %d for its new daemon (%s, was %s)",
                    name,
                    entry.node_name,
                    entry.index,
                    entry.ip_address,
                    old.ip_address,
                    extra=log,
                )

    async def _prune(self, domain_uid: str, pod_nodes: set[str], log: dict[str, str]) -> None:
        cliques = []
        for raw in self._cache.cliques.by_index(caches.CD_INDEX, domain_uid):
            if sharedimex.is_registry_name(raw.metadata.name or ""):
                continue
            try:
                cliques.append(self._decode(raw))
            except DecodeError:
                continue
        stale = {c.name: status.stale_clique_nodes(c, pod_nodes) for c in cliques}
        if not any(stale.values()):
            return
        # The cache may lag behind a daemon pod created a moment ago: ask the API server.
        live = await self._api.list(
            Pod, namespace=self._settings.namespace, labels={names.COMPUTE_DOMAIN_LABEL: domain_uid}
        )
        alive = {p.spec.nodeName for p in live if p.spec is not None and p.spec.nodeName}
        for clique in cliques:
            gone = [n for n in stale[clique.name] if n not in alive]
            ops = cliqueindex.removal_ops(clique, gone)
            if not ops:
                continue
            try:
                raw = await self._api.patch(
                    ComputeDomainCliqueResource,
                    clique.name,
                    ops,
                    namespace=self._settings.namespace,
                    patch_type=PatchType.JSON,
                )
            except kubeapi.NotFound:
                continue
            except kubeapi.Invalid as err:  # an entry moved meanwhile: the next pass re-plans
                await self._fresh(clique.name)
                raise errors.TemporaryError(f"pruning clique {clique.name}: {err}") from err
            self._cache.cliques.observe(raw)
            logger.info(
                "pruned %s from clique %s (daemon pods gone)",
                ", ".join(gone),
                clique.name,
                extra=log,
            )


def _log_signals(
    name: str,
    before: ComputeDomainClique | None,
    after: ComputeDomainClique,
    members: list[cliqueindex.Candidate],
    log: dict[str, str],
) -> None:
    """One line for the entries a write turned Ready from their agents' signals, and one per
    entry it turned NotReady, with why."""
    why = {m.node_name: m.why for m in members if m.signal is not None}
    ready: list[str] = []
    for entry in after.daemons:
        if entry.node_name not in why:
            continue
        old = before.daemon(entry.node_name) if before is not None else None
        was = old.status if old is not None else None
        if entry.status is was:
            continue
        if entry.status is Readiness.READY:
            ready.append(entry.node_name)
        elif was is Readiness.READY:
            logger.info(
                "clique %s: node %s NotReady: %s",
                name,
                entry.node_name,
                why[entry.node_name],
                extra=log,
            )
    if ready:
        logger.info(
            "clique %s: %d entries Ready from their agents' IMEX signals: %s",
            name,
            len(ready),
            ", ".join(ready),
            extra=log,
        )
