"""Our node's entry in the clique's shared registry: register, follow the peers, report our
readiness, and leave the entry NotReady (never removed) when the shared IMEX stops.

Unlike a per-CD daemon (whose entry the controller writes, docs/decisions/0009), the agent
registers itself: there is no CD to assign an index for, and the registry outlives every CD.
The rules are ``registry``'s (pure), the writes ``registrywrites``' (create, or replace with the
resourceVersion read); this module follows the registry by watch (``kubeio.follow``: list, then
watch; no polling) and decides:

* every snapshot is planned from (our entry with our IP, its status our IMEX check's); a plan
  that differs from the stored object is written, as writes that carry no resourceVersion
  (``registrywrites``), so the other agents of the clique registering at the same moment, and
  the plugin's channel annotations, neither make it fail nor are dropped by it; a write refused
  because our entry moved (:class:`registrywrites.Stale`), or one that failed without an
  answer, is followed by a fresh read and a new plan (after a short backoff);
* we count as registered only while our entry holds its index (``registry.valid_position``):
  an entry that lost the race for its index is planned again (moved to a free one) before
  IMEX may start;
* once a snapshot lists us with our IP, its entries' index → IP mapping goes to ``on_peers``
  (every entry, Ready or not: a stopped node keeps its slot, and its name resolves to its last
  address); only a change of that mapping is passed on, so an annotation, a status or a
  ``lastIndices`` change never reaches IMEX;
* our node's reports ride on the same writes (``registry.with_reports``): the peers our IMEX
  lost (:meth:`Registration.set_lost`, from the peer watch) and why it cannot start
  (:meth:`Registration.set_blocked`, from the session watch), as annotations of the registry
  under our index, which the controller reads for every CD our node serves;
* a full registry (every index taken by other nodes) is logged once until a slot frees up;
* on cancellation our entry is marked NotReady, bounded by ``stop_timeout`` (the controller
  then reports the node NotReady for every CD it serves; the index is kept for our return).

An API failure other than a conflict is retried with backoff when temporary; a permanent one
(401/403: the agent's RBAC lacks ``create``/``update`` on the cliques) ends ``run()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable

from lightkube import AsyncClient

from compute_domains.agent import registry, registrywrites
from compute_domains.api import sharedimex
from compute_domains.api.clique import CliqueFullError, ComputeDomainClique
from compute_domains.api.clique import ComputeDomainCliqueResource as Resource
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import cliqueentry, kubeio, metrics
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff, errors
from compute_domains.infra.kube import informers

logger = logging.getLogger(__name__)


class Registration:
    """Our entry in ``shared-imex.<clique>`` (see the module docstring).

    Args:
        client: API client (the agent's).
        ident: our node, pod IP and the driver namespace; ``clique_id`` names the registry.
        max_nodes: slots of the shared IMEX domain.
        retry: backoff of failed writes.
        on_peers: called with each new index → IP mapping that includes us; must not block.
        meter: where refused writes are counted.
        stop_timeout: bound in seconds of marking our entry NotReady at the end.
    """

    def __init__(
        self,
        client: AsyncClient,
        ident: Identity,
        *,
        max_nodes: int,
        retry: backoff.Backoff,
        on_peers: Callable[[cliqueentry.PeerMapping], None],
        meter: metrics.DaemonMetrics,
        stop_timeout: float = 10.0,
        rng: random.Random | None = None,
        shared: informers.Informers | None = None,
    ) -> None:
        self._client = client
        self._shared = shared
        self._ident = ident
        self._max = max_nodes
        self._retry = retry
        self._on_peers = on_peers
        self._stop_timeout = stop_timeout
        self._rng = rng or random.Random()
        self._writes = registrywrites.RegistryWrites(
            client, clique_id=ident.clique_id, namespace=ident.pod_namespace, meter=meter
        )
        self._log = logging.LoggerAdapter(logger, {"node": ident.node_name})
        self._latest: ComputeDomainClique | None = None
        self._seen = False
        self._kick = asyncio.Event()
        self._status = Readiness.NOT_READY
        self._peers: dict[int, str] | None = None
        self._full = False
        self._lost: dict[int, str] = {}
        self._blocked: sharedimex.Blocked | None = None
        self.index: int | None = None
        """Our index once registered (kept for good)."""

    @property
    def name(self) -> str:
        """The registry's name."""
        return self._writes.name

    def set_status(self, status: Readiness) -> None:
        """Our shared IMEX's check changed; it is written into our entry."""
        if status is not self._status:
            self._status = status
            self._kick.set()

    def set_lost(self, lost: dict[int, str]) -> None:
        """The peers our IMEX lost past the bound changed (index → since); written into our
        lost-peers annotation of the registry."""
        if lost != self._lost:
            self._lost = dict(lost)
            self._kick.set()

    def set_blocked(self, blocked: sharedimex.Blocked | None) -> None:
        """Why our IMEX cannot start changed (None: it can); written into our blocked
        annotation of the registry."""
        if blocked != self._blocked:
            self._blocked = blocked
            self._kick.set()

    async def run(self) -> None:
        """Register, follow and report until cancelled; then mark our entry NotReady.

        Raises:
            errors.PermanentError: the registry cannot be written (RBAC) or read.
        """
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._follow(), name="registry-watch")
                tg.create_task(self._report_loop(), name="registry-report")
        finally:
            await self._stop_bounded()

    async def _follow(self) -> None:
        async for raw in kubeio.follow(
            self._client,
            Resource,
            self.name,
            namespace=self._ident.pod_namespace,
            retry=self._retry,
            rng=self._rng,
            shared=self._shared,
        ):
            try:
                self._observe(registrywrites.decode(raw), fresh=False)
            except errors.PermanentError as err:
                self._log.warning("%s; waiting for a readable version", err)
                continue
            self._kick.set()

    def _observe(self, current: ComputeDomainClique | None, *, fresh: bool) -> None:
        """Remember the newest state (a late watch event never hides our own write)."""
        if not fresh and current is not None and self._latest is not None:
            new, old = kubeio.version(current), kubeio.version(self._latest)
            if new is not None and old is not None and new < old:
                return
        self._latest, self._seen = current, True
        ident = self._ident
        mine = registry.registered(current, ident.node_name, ident.pod_ip, self._max)
        if current is None or mine is None:
            return  # not (yet) registered with our address at our own index: no IMEX yet
        if mine.index != self.index:
            self.index = mine.index
            self._full = False
            self._log.info("registered in %s at index %d", self.name, mine.index)
        valid = registry.without_void(current, self._max)
        mapping, problems = cliqueentry.peer_mapping(valid, ident.clique_id, self._max)
        if mapping == self._peers:
            return
        for problem in problems:
            self._log.warning("%s: skipping entry: %s", self.name, problem)
        self._peers = mapping
        self._on_peers(dict(mapping))

    async def _report_loop(self) -> None:
        ident = self._ident
        attempt = 0
        while True:
            await self._kick.wait()
            self._kick.clear()
            if not self._seen:
                continue  # the watch's first list comes first
            current = self._latest
            try:
                wanted = registry.plan(
                    current,
                    node=ident.node_name,
                    ip=ident.pod_ip,
                    clique_id=ident.clique_id,
                    namespace=ident.pod_namespace,
                    max_nodes=self._max,
                    status=self._status,
                    index=self.index,
                    lost=self._lost,
                    blocked=self._blocked,
                )
            except CliqueFullError as err:
                if not self._full:
                    self._full = True
                    self._log.error("cannot join the clique's shared IMEX: %s", err)
                continue  # a change of the registry tries again
            if wanted is None:
                attempt = 0
                continue
            try:
                written = await self._writes.write(current, wanted, ident.node_name)
                self._observe(written, fresh=True)
                attempt = 0
                continue
            except errors.TemporaryError as err:
                delay = self._retry.delay(attempt, self._rng)
                attempt += 1
                self._log.debug("%s: %s; again in %.2fs", self.name, err, delay)
                # Also after a failure without an answer: an append that did land must be
                # seen before we plan again, or we would append a second entry.
                await self._reread()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._kick.wait()
            self._kick.set()

    async def _reread(self) -> None:
        try:
            current = await self._writes.read()
        except errors.TemporaryError as err:
            self._log.debug("re-reading %s: %s", self.name, err)
            return
        self._observe(current, fresh=True)

    async def _stop_bounded(self) -> None:
        try:
            async with asyncio.timeout(self._stop_timeout):
                await self._mark_not_ready()
        except TimeoutError:
            self._log.warning(
                "marking our entry of %s NotReady took over %.0fs; left as it was",
                self.name,
                self._stop_timeout,
            )

    async def _mark_not_ready(self) -> None:
        ident = self._ident
        attempt = 0
        while True:
            try:
                current = await self._writes.read()
                wanted = registry.plan_stopped(current, node=ident.node_name, ip=ident.pod_ip)
                if wanted is None:
                    return
                await self._writes.write(current, wanted, ident.node_name)
                self._log.info(
                    "shared IMEX stopped: our entry of %s is NotReady (index %s kept)",
                    self.name,
                    self.index,
                )
                return
            except errors.PermanentError as err:
                self._log.warning("cannot mark our entry of %s NotReady: %s", self.name, err)
                return
            except errors.TemporaryError as err:
                self._log.debug("marking our entry NotReady: %s; retrying", err)
                await asyncio.sleep(self._retry.delay(attempt, self._rng))
                attempt += 1
