"""The controller component: ``Controller.run()`` wires settings to a leader's work and serves.

Shape of a run (all under one TaskGroup, every task named and guarded):
- ``metrics-http`` serves ``/metrics``, ``/healthz``, ``/readyz`` (unless the port is 0);
- ``leader`` campaigns for the Lease (or, without leader election, leads at once) and while
  leading runs one *term*: fresh informers, a fresh work queue, ``workers`` reconcile workers,
  the clique index assigner (``assigner``, its own queue), the held-node replacer
  (``replacer``, its own queue) and the orphan sweep. A lost term is
  cancelled as a whole and the next one starts from scratch, so no state leaks between terms.

Workers start only when every cache is filled, so an absent object in the cache means absent.
The sweep runs once at that moment and then every ``sweep_interval_s``: it enqueues every CD
(a resync) and every UID that an object still names but no CD has, which the reconcile then
tears down once a live list confirms the CD is really gone.

Errors: a reconcile's ``TemporaryError`` is retried with per-CD backoff (or the delay it asks
for); a ``PermanentError`` is logged and not retried until the CD changes; anything else is a
bug in one CD's handling: it is logged with its traceback and retried with backoff, so it
never stops the controller for the other CDs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from typing import Any

from compute_domains.api import featuregates
from compute_domains.controller import (
    assigner,
    caches,
    config,
    events,
    kubeapi,
    leaderelection,
    metrics,
    reconcile,
    replacer,
)
from compute_domains.infra import errors, kube, tasks, workqueue
from compute_domains.infra import metrics as infra_metrics

logger = logging.getLogger(__name__)


class Controller:
    """One controller instance. Construction does no IO; ``run()`` does the work."""

    def __init__(self, settings: config.ControllerSettings) -> None:
        self.settings = settings
        self.metrics = metrics.Metrics()
        suffix = uuid.uuid4().hex[:8]
        base = settings.leader_election.identity or "compute-domains-controller"
        self.identity = f"{base}-{suffix}"
        """This instance's leader-election identity and Event ``reportingInstance``."""
        self.metrics_server: infra_metrics.HttpEndpoint | None = None
        self.leading = asyncio.Event()
        """Set while this instance leads (its caches are filled and workers run)."""

    async def run(self) -> None:
        """Run until cancelled; raises only on a fatal error."""
        # NVIDIA's startup line names these (its tooling greps them): the controller manager
        # config with maxNodesPerIMEXDomain, additionalNamespaces (we run daemons only in the
        # driver namespace) and the feature gates in effect.
        logger.info(
            "controller starting: %s; controller manager config: maxNodesPerIMEXDomain=%d, "
            "additionalNamespaces: [] (daemons run in %s only); Feature gates: %s",
            _describe(self.settings),
            self.settings.daemon.max_nodes_per_imex_domain,
            self.settings.namespace,
            featuregates.render(featuregates.effective()),
        )
        client = kube.client(self.settings.kube)
        api = kubeapi.Api(client, self.metrics)
        try:
            async with asyncio.TaskGroup() as tg:
                if self.settings.metrics_port:
                    self.metrics_server = infra_metrics.HttpEndpoint(
                        host=self.settings.metrics_address,
                        port=self.settings.metrics_port,
                        render=self.metrics.render,
                        checks={
                            "/healthz": infra_metrics.always_ok,
                            "/readyz": infra_metrics.always_ok,
                        },
                    )
                    tasks.spawn(tg, "metrics-http", self.metrics_server.run(), log=logger)
                tasks.spawn(tg, "leader", self._campaign(api), log=logger)
        finally:
            await client.close()
            logger.info("controller stopped")

    async def _campaign(self, api: kubeapi.Api) -> None:
        le = self.settings.leader_election

        async def term() -> None:
            await _Term(api, self.settings, self.metrics, self.identity, self.leading).run()

        if not le.enabled:
            self.metrics.leader.set(1)
            await term()
            return
        elector = leaderelection.LeaderElector(
            api,
            le,
            namespace=self.settings.lease_namespace,
            identity=self.identity,
            on_change=lambda leading: self.metrics.leader.set(1 if leading else 0),
        )
        await elector.run(term)


class _Term:
    """One leadership term: caches, queue, workers, sweep; all discarded when it ends."""

    def __init__(
        self,
        api: kubeapi.Api,
        settings: config.ControllerSettings,
        meter: metrics.Metrics,
        identity: str,
        leading: asyncio.Event,
    ) -> None:
        self._settings = settings
        self._metrics = meter
        self._leading = leading
        self.queue: workqueue.WorkQueue[str] = workqueue.WorkQueue(retry_backoff=settings.retry)
        # The caches route daemon pod and clique changes to the assigner (only once they run).
        self.cache = caches.Caches(
            api,
            settings,
            self._enqueue,
            lambda uid: self._assign(uid),
            lambda node: self._replace(node),
        )
        self.assigner = assigner.IndexAssigner(api=api, cache=self.cache, settings=settings)
        recorder = events.EventRecorder(api, instance=identity)
        self.replacer = replacer.Replacer(
            api=api, cache=self.cache, settings=settings, recorder=recorder
        )
        self.reconciler = reconcile.Reconciler(
            api=api,
            cache=self.cache,
            settings=settings,
            recorder=recorder,
            meter=meter,
            enqueue=self._enqueue,
        )

    def _enqueue(self, domain_uid: str, delay: float) -> None:
        self.queue.add(domain_uid, delay)

    def _assign(self, domain_uid: str) -> None:
        self.assigner.enqueue(domain_uid)

    def _replace(self, node: str) -> None:
        self.replacer.enqueue(node)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                for inf in self.cache.all:
                    tasks.spawn(tg, f"informer-{inf.name}", inf.run(), log=logger)
                await self.cache.wait_synced()
                self._metrics.bind_cd_status(
                    lambda: metrics.count_statuses(self.cache.status_counts())
                )
                self._metrics.queue_depth.set_function(lambda: len(self.queue))
                logger.info("caches filled; reconciling")
                for i in range(self._settings.workers):
                    tasks.spawn(tg, f"worker-{i}", self._work(), log=logger)
                tasks.spawn(tg, "index-assigner", self.assigner.run(), log=logger)
                tasks.spawn(tg, "held-node-replacer", self.replacer.run(), log=logger)
                tasks.spawn(tg, "sweep", self._sweep(), log=logger)
                self._leading.set()
        finally:
            self._leading.clear()
            self._metrics.bind_cd_status(None)

    async def _sweep(self) -> None:
        while True:
            cds = {domain_uid for cd in self.cache.cds.objects() if (domain_uid := cd.metadata.uid)}
            orphans = self.cache.referenced_domain_uids() - cds
            logger.debug(
                "sweep: Cleanup: perform for the objects of %d ComputeDomains and %d UIDs",
                len(cds),
                len(orphans),
            )
            if orphans:
                logger.info("sweep: %d UIDs name no cached ComputeDomain", len(orphans))
            for domain_uid in sorted(cds | orphans):
                self.queue.add(domain_uid)
            for domain_uid in sorted(cds):
                self.assigner.enqueue(domain_uid)
            for node in self.cache.held_nodes():
                self.replacer.enqueue(node)
            await asyncio.sleep(self._settings.sweep_interval_s)

    def _who(self, domain_uid: str) -> dict[str, str]:
        """Log binding for a CD UID: ``ns/name`` when the CD is cached, else the UID."""
        raw = self.cache.cd(domain_uid)
        name = f"{raw.metadata.namespace}/{raw.metadata.name}" if raw is not None else domain_uid
        return {"cd": name}

    async def _work(self) -> None:
        while True:
            domain_uid = await self.queue.get()
            started = time.perf_counter()
            outcome = "success"
            logger.debug("reconciling %s", domain_uid, extra=self._who(domain_uid))
            try:
                await self.reconciler.reconcile(domain_uid)
                self.queue.forget(domain_uid)
            except errors.TemporaryError as err:
                outcome = "retry"
                delay = self.queue.retry(domain_uid, err.delay)
                self._metrics.reconcile_errors.labels(kind="temporary").inc()
                logger.warning(
                    "reconcile failed (retry %d in %.2fs): %s",
                    self.queue.failures(domain_uid),
                    delay,
                    err,
                    extra=self._who(domain_uid),
                )
            except errors.ComputeDomainsError as err:
                outcome = "error"
                self.queue.forget(domain_uid)
                self._metrics.reconcile_errors.labels(kind="permanent").inc()
                logger.error("reconcile failed permanently: %s", err, extra=self._who(domain_uid))
            except Exception:
                # A bug in one CD's handling must not stop the others: record it, retry later.
                outcome = "error"
                self.queue.retry(domain_uid)
                self._metrics.reconcile_errors.labels(kind="unexpected").inc()
                logger.exception("reconcile failed unexpectedly", extra=self._who(domain_uid))
            finally:
                self.queue.done(domain_uid)
                elapsed = time.perf_counter() - started
                self._metrics.reconcile_seconds.labels(outcome=outcome).observe(elapsed)
                logger.debug("reconciled %s in %.3fs (%s)", domain_uid, elapsed, outcome)


def _describe(settings: config.ControllerSettings) -> dict[str, Any]:
    """The effective settings as one loggable record (nothing secret is in them)."""
    out = dataclasses.asdict(settings)
    out["kube"] = {k: str(v) for k, v in out["kube"].items()}
    return out
