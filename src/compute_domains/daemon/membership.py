"""Our entry in the ComputeDomainClique: wait for it, keep its readiness true, follow the peers,
remove it at shutdown.

The clique protocol (who writes what; docs/decisions/0009):

* The controller writes the entries. A daemon asks for one by labelling its pod with its clique
  ID (``readiness.label_pod``, which it does first thing anyway); the controller's index
  assigner sees the label, node and IP and creates the clique ``<cdUID>.<cliqueID>`` (driver
  namespace, labels CD UID and clique ID, our pod and DaemonSet as owners) or patches our entry
  into it: the index our node last held in this clique when free, else the lowest free one in
  ``[0, max_nodes)``; a replacement pod on the same node keeps its node's index (the controller
  takes the entry over for the new IP and resets it to NotReady). No daemon ever writes the
  clique with a resourceVersion, so joins never conflict and never retry (issue 15).
* We follow the clique by watch (``kubeio.follow``, no polling) and are *registered* once a
  snapshot holds our entry with our IP: then our index is known and every snapshot yields the
  index → IP mapping of the peers (``on_peers``; entries outside ``[0, max_nodes)`` or with an
  invalid IP cannot be named in ``nodes.cfg`` and are skipped with a warning).
* A clique that lists ``max_nodes`` daemons without us is full: reported once (log line + Event
  on our pod) until we are registered; the pod never becomes Ready meanwhile, since IMEX is not
  started before our entry exists.
* Our entry's ``status`` is our pod's own readiness, written by a JSON patch guarded by tests of
  our node name and IP at the entry's position (``cliqueentry.status_patch``,
  ``cliquewrites``): no resourceVersion, so no other writer makes it conflict; if our entry
  moved, it fails (422), we re-read and patch again. A resident agent's daemon whose pod
  declares the IMEX readiness signal writes no status here (``reports_status=False``): the
  controller writes it from that signal (``daemon.podsignal``, docs/decisions/0025).
* The peers our IMEX lost (``peerwatch``, via :meth:`Membership.set_lost`) go into our own
  annotation of the clique (``cliqueentry.lost_peers_note``), written only when it changes.
* On shutdown we remove our entry the same way, matched by node name *and* our pod IP, so a
  terminating predecessor never removes the entry its replacement took over. Entries of
  daemons that died without this are pruned by the controller.

The pure rules are ``cliqueentry``'s, the writes ``cliquewrites``'; this module follows the
clique and decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient

from compute_domains.api import names
from compute_domains.api.clique import (
    CliqueDaemon,
    ComputeDomainClique,
    ComputeDomainCliqueResource,
)
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import cliqueentry, cliquewrites, events, kubeio, metrics
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff, errors
from compute_domains.infra.kube import informers

logger = logging.getLogger(__name__)


class Membership:
    """Follows our clique, reports our readiness in our entry, removes it when stopped.

    Args:
        client: API client (in-cluster).
        ident: who we are.
        max_nodes: slots per clique.
        retry: backoff for failed writes.
        recorder: Events on our pod (clique full).
        on_peers: called with each new peer mapping that includes us; must not block.
        deregister_timeout: bound of the removal at shutdown, in seconds.
        meter: where refused writes are counted (a fresh registry of its own when None).
        on_entry: called with our entry in every clique state seen that holds it (start-up
            steps: registered, Ready reported); must not block.
    """

    def __init__(
        self,
        client: AsyncClient,
        ident: Identity,
        *,
        max_nodes: int,
        retry: backoff.Backoff,
        recorder: events.PodEvents,
        on_peers: Callable[[cliqueentry.PeerMapping], None],
        deregister_timeout: float = 10.0,
        rng: random.Random | None = None,
        meter: metrics.DaemonMetrics | None = None,
        on_entry: Callable[[CliqueDaemon], None] | None = None,
        shared: informers.Informers | None = None,
        reports_status: bool = True,
    ) -> None:
        self._client = client
        self._reports = reports_status
        self._shared = shared
        self._ident = ident
        self._max = max_nodes
        self._retry = retry
        self._recorder = recorder
        self._on_peers = on_peers
        self._deregister_timeout = deregister_timeout
        self._rng = rng or random.Random()
        self._writes = cliquewrites.CliqueWrites(client, ident, meter or metrics.DaemonMetrics())
        self._on_entry = on_entry
        self._log = logging.LoggerAdapter(
            logger, {"cd": ident.cd, "node": ident.node_name, "pod": ident.pod_name}
        )
        self._latest: ComputeDomainClique | None = None
        self._kick = asyncio.Event()
        self._status = Readiness.NOT_READY
        self._full_reported = False
        self._index: int | None = None
        self._peers: dict[int, str] | None = None
        self._lost: dict[int, str] = {}

    @property
    def index(self) -> int | None:
        """Our index once registered, else None."""
        return self._index

    def set_status(self, status: Readiness) -> None:
        """Our pod's readiness changed; it is written into our entry."""
        if status is not self._status:
            self._status = status
            self._kick.set()

    def set_lost(self, lost: dict[int, str]) -> None:
        """The peers our IMEX lost past the bound changed (index → since); they are written
        into our annotation of the clique."""
        if lost != self._lost:
            self._lost = dict(lost)
            self._kick.set()

    async def run(self) -> None:
        """Follow the clique and report until cancelled; then deregister (bounded)."""
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._follow(), name="clique-watch")
                tg.create_task(self._report_loop(), name="clique-status")
        finally:
            await self._deregister_bounded()

    async def _follow(self) -> None:
        async for raw in kubeio.follow(
            self._client,
            ComputeDomainCliqueResource,
            self._ident.clique_name,
            namespace=self._ident.pod_namespace,
            retry=self._retry,
            rng=self._rng,
            shared=self._shared,
        ):
            self._observe(None if raw is None else ComputeDomainClique.from_resource(raw), raw)
            self._kick.set()

    def _observe(self, clique: ComputeDomainClique | None, raw: Any = None) -> None:
        """Remember the newest state seen (a late watch event never hides our own write)."""
        if clique is not None and self._latest is not None:
            new, old = kubeio.version(raw), kubeio.version(self._latest)
            if new is not None and old is not None and new < old:
                return
        self._latest = clique
        if clique is None:
            return
        if clique.domain_uid != self._ident.domain_uid:
            self._log.warning(
                "clique %s is labelled for CD %r; ignoring", clique.name, clique.domain_uid
            )
            return
        if cliqueentry.is_registered(clique, self._ident):
            self._publish(clique)
        elif cliqueentry.is_left_out(clique, self._ident, self._max):
            self._report_full(clique)

    def _publish(self, clique: ComputeDomainClique) -> None:
        mine = clique.daemon(self._ident.node_name)
        if mine is not None and mine.index != self._index:
            self._index = mine.index
            self._log.info("registered in clique %s at index %d", clique.name, mine.index)
            if self._full_reported:
                self._full_reported = False
                self._log.info("clique %s has a free slot again; joined", clique.name)
        if mine is not None and self._on_entry is not None:
            self._on_entry(mine)
        mapping, problems = cliqueentry.peer_mapping(clique, self._ident.clique_id, self._max)
        if mapping == self._peers:
            return
        for problem in problems:
            self._log.warning("clique %s: skipping entry: %s", clique.name, problem)
        self._peers = mapping
        self._on_peers(dict(mapping))

    async def _report_loop(self) -> None:
        """Keep our entry's status equal to our readiness (once the controller listed us)."""
        attempt = 0
        while True:
            await self._kick.wait()
            self._kick.clear()
            current = self._latest
            if current is None or current.domain_uid != self._ident.domain_uid:
                continue
            ops = (
                cliqueentry.status_patch(current, self._ident, self._status)
                if self._reports
                else None
            )
            note = cliqueentry.lost_peers_note(current, self._ident, self._lost)
            if ops is None and note is None:
                continue
            try:
                if ops is not None:
                    began = asyncio.get_running_loop().time()
                    written = await self._writes.patch(ops, f"report {self._status.value}")
                    # The write's own time (formation profiles: 18 writers patch one clique).
                    self._log.info(
                        "reported %s in clique %s (write took %.3fs)",
                        self._status.value,
                        current.name,
                        asyncio.get_running_loop().time() - began,
                    )
                    self._observe(written, written.to_resource())
                if note is not None:
                    written = await self._writes.annotate(*note)
                    self._observe(written, written.to_resource())
            except errors.TemporaryError as err:
                delay = self._retry.delay(attempt, self._rng) if err.delay is None else err.delay
                attempt += 1
                self._log.debug("clique status: %s; retrying in %.2fs", err, delay)
                if isinstance(err, cliquewrites.EntryMoved):
                    await self._reread()
                # Retry after the delay, or at once when the clique changes meanwhile.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._kick.wait()
                self._kick.set()
                continue
            attempt = 0

    async def _reread(self) -> None:
        """Replace what we know with a fresh read (a failed read leaves it as it was)."""
        try:
            raw = await self._writes.read()
        except errors.ComputeDomainsError as err:
            self._log.debug("re-reading our clique: %s", err)
            return
        self._latest = None  # a fresh read always wins over what we had
        self._observe(None if raw is None else ComputeDomainClique.from_resource(raw), raw)

    def _report_full(self, clique: ComputeDomainClique) -> None:
        if self._full_reported:
            return
        self._full_reported = True
        message = (
            f"ComputeDomain {self._ident.cd}: clique {clique.name} is full "
            f"(all {self._max} slots taken, MAX_NODES_PER_IMEX_DOMAIN={self._max}); node "
            f"{self._ident.node_name} cannot join the IMEX domain and stays NotReady until a "
            "slot frees up"
        )
        self._log.error("%s", message)
        self._recorder.post(events.WARNING, events.CLIQUE_FULL, message)

    async def _deregister_bounded(self) -> None:
        try:
            async with asyncio.timeout(self._deregister_timeout):
                await self._deregister()
        except TimeoutError:
            self._log.warning(
                "removing our clique entry took over %.0fs; the controller prunes it later",
                self._deregister_timeout,
            )

    async def _deregister(self) -> None:
        attempt = 0
        while True:
            try:
                raw = await self._writes.read()
                current = None if raw is None else ComputeDomainClique.from_resource(raw)
                ops = cliqueentry.removal_patch(current, self._ident) if current else None
                if ops is None:
                    return
                await self._writes.patch(ops, "remove our entry")
                mine = current.daemon(self._ident.node_name) if current else None
                key = f"{names.LOST_PEERS_ANNOTATION_PREFIX}{mine.index if mine else ''}"
                if current is not None and key in (current.metadata.annotations or {}):
                    await self._writes.annotate(key, None)
                # NVIDIA's tests grep "Successfully removed daemon" + "from ComputeDomain ns/name".
                self._log.info(
                    "removed our entry from clique %s: Successfully removed daemon of node %s "
                    "(IP %s), detached from ComputeDomain %s",
                    self._ident.clique_name,
                    self._ident.node_name,
                    self._ident.pod_ip,
                    self._ident.cd,
                )
                return
            except errors.PermanentError as err:
                self._log.warning("cannot remove our clique entry: %s", err)
                return
            except errors.TemporaryError as err:
                self._log.debug("removing our clique entry: %s; retrying", err)
                await asyncio.sleep(self._retry.delay(attempt, self._rng))
                attempt += 1
