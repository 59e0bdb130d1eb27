"""Our entry in the ComputeDomainClique: register, keep it true, follow the peers, deregister.

The clique protocol (who writes what):

* Each daemon writes only its own entry (key ``nodeName``) and its own owner reference. It
  creates the clique ``<cdUID>.<cliqueID>`` in the driver namespace when it is missing (labels
  CD UID and clique ID), then registers: an existing entry of its node keeps its index (a
  replacement pod on the same node takes over its predecessor's slot and refreshes the IP); a new
  node takes the lowest free index in ``[0, max_nodes)``. The entry's ``status`` is the daemon
  pod's own readiness, written in the same update. Every daemon pod adds itself to
  ``ownerReferences`` (plain references, no ``controller``, no ``blockOwnerDeletion``), so the
  garbage collector deletes the clique once every daemon pod that registered is gone.
* Writes are full updates with optimistic concurrency: a 409 re-reads the object and retries
  with backoff, so concurrent joins never take the same index (the list-map key keeps node names
  unique). A 409 is an expected race, not news: it is counted
  (``compute_domains_daemon_clique_conflicts_total``) and logged at debug level only. A change
  of our readiness alone (the Ready report, on every daemon's critical path) is a JSON patch of
  our entry's ``status``, guarded by tests of our entry's node and IP at its position
  (``cliqueentry.status_patch``): it needs no resourceVersion, so it does not conflict with the
  other daemons' joins; if our entry moved, the patch fails (422) and a full update follows.
  A full clique is reported (log line + Event on our pod) and retried on every clique change
  and with backoff; the pod never becomes Ready meanwhile, since IMEX is not started.
* A clique deleted after we registered in it is created again (an administrator's mistake
  repaired), except while our CD is being deleted or gone: its teardown deleted it while its
  daemons still run, and 18 daemons re-creating and re-joining it cost ~70 writes for nothing.
* On shutdown the daemon removes its entry, matched by node name *and* its own pod IP, so a
  terminating predecessor never removes the entry its replacement already took over. Entries of
  daemons that died without this are pruned by the controller.
* Peers: every snapshot that holds our entry yields the index → IP mapping of the clique's
  entries (``on_peers``); entries with an index outside ``[0, max_nodes)`` or an invalid IP
  cannot be named in ``nodes.cfg`` and are skipped with a warning (upstream treats them as fatal).

The pure rules (our wanted entry, its removal, the peer mapping) are ``cliqueentry``'s; this
module does the IO: it follows the clique by watch and writes it.

Size: about 350 lines, one class: the join (full update), the Ready report (status patch),
re-reads and the deregistration all act on the snapshot the watch keeps, so splitting the writes
from the watch would hand that snapshot between modules (issue 15's central index assignment is
expected to shrink the join). TODO(issue 15): split once the join no longer races.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.types import PatchType

from compute_domains.api.clique import (
    CliqueDaemon,
    CliqueFullError,
    ComputeDomainClique,
    ComputeDomainCliqueResource,
)
from compute_domains.api.computedomain import Readiness
from compute_domains.daemon import cliqueentry, events, kubeio, metrics
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff, errors, kube

logger = logging.getLogger(__name__)


class Membership:
    """Keeps our clique entry true while running; removes it when stopped.

    Args:
        client: API client (in-cluster).
        ident: who we are.
        max_nodes: slots per clique.
        retry: backoff for failed writes and a full clique.
        recorder: Events on our pod (clique full).
        on_peers: called with each new peer mapping that includes us; must not block.
        deregister_timeout: bound of the removal at shutdown, in seconds.
        meter: where lost write races are counted (a fresh registry of its own when None).
        on_entry: called with our entry in every clique state seen that holds it (start-up
            steps: registered, Ready reported); must not block.
        co_owner_pending: nothing is written until :meth:`set_co_owner` was called (the
            DaemonSet is known from our pod's label patch, which runs meanwhile).
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
        co_owner: dict[str, str] | None = None,
        meter: metrics.DaemonMetrics | None = None,
        on_entry: Callable[[CliqueDaemon], None] | None = None,
        co_owner_pending: bool = False,
    ) -> None:
        self._client = client
        self._meter = meter or metrics.DaemonMetrics()
        self._ident = ident
        self._max = max_nodes
        self._retry = retry
        self._recorder = recorder
        self._on_peers = on_peers
        self._deregister_timeout = deregister_timeout
        self._rng = rng or random.Random()
        # Our DaemonSet as a second owner keeps the clique (and the indices it remembers) while
        # the domain lives, even when every daemon pod is gone at once (upstream C2).
        self._co_owner = co_owner
        self._owner_known = not co_owner_pending
        self._on_entry = on_entry
        self._log = logging.LoggerAdapter(
            logger, {"cd": ident.cd, "node": ident.node_name, "pod": ident.pod_name}
        )
        self._latest: ComputeDomainClique | None = None
        self._listed = False
        self._kick = asyncio.Event()
        self._status = Readiness.NOT_READY
        self._full_reported = False
        self._teardown_seen = False
        self._index: int | None = None
        self._peers: dict[int, str] | None = None

    @property
    def index(self) -> int | None:
        """Our index once registered, else None."""
        return self._index

    def set_co_owner(self, ref: dict[str, str] | None) -> None:
        """Our DaemonSet (None: no controller) is known now; writes may begin."""
        self._co_owner = ref
        self._owner_known = True
        self._kick.set()

    def set_status(self, status: Readiness) -> None:
        """Our pod's readiness changed; it is written into our entry."""
        if status is not self._status:
            self._status = status
            self._kick.set()

    async def run(self) -> None:
        """Register and follow the clique until cancelled; then deregister (bounded)."""
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._follow(), name="clique-watch")
                tg.create_task(self._reconcile_loop(), name="clique-sync")
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
        ):
            self._observe(None if raw is None else ComputeDomainClique.from_resource(raw), raw)
            self._listed = True
            self._kick.set()

    def _observe(self, clique: ComputeDomainClique | None, raw: Any = None) -> None:
        """Remember the newest state seen (a late watch event never hides our own write)."""
        if clique is not None and self._latest is not None:
            new, old = kubeio.version(raw), kubeio.version(self._latest)
            if new is not None and old is not None and new < old:
                return
        self._latest = clique
        if clique is not None and cliqueentry.is_registered(clique, self._ident):
            self._publish(clique)

    def _publish(self, clique: ComputeDomainClique) -> None:
        mine = clique.daemon(self._ident.node_name)
        if mine is not None and mine.index != self._index:
            self._index = mine.index
            self._log.info("registered in clique %s at index %d", clique.name, mine.index)
        if mine is not None and self._on_entry is not None:
            self._on_entry(mine)
        mapping, problems = cliqueentry.peer_mapping(clique, self._ident.clique_id, self._max)
        if mapping == self._peers:
            return
        for problem in problems:
            self._log.warning("clique %s: skipping entry: %s", clique.name, problem)
        self._peers = mapping
        self._on_peers(dict(mapping))

    async def _reconcile_loop(self) -> None:
        attempt = 0
        while True:
            await self._kick.wait()
            self._kick.clear()
            if not self._listed or not self._owner_known:
                continue
            try:
                await self._sync()
            except errors.TemporaryError as err:
                delay = self._retry.delay(attempt, self._rng) if err.delay is None else err.delay
                attempt += 1
                if isinstance(err, CliqueFullError):
                    self._report_full(err)
                elif isinstance(err, kube.Conflict | kube.AlreadyExists):
                    self._log.debug(
                        "clique sync: another daemon wrote first (409): %s; retrying on the "
                        "fresh state in %.2fs",
                        err,
                        delay,
                    )
                else:
                    self._log.info("clique sync: %s; retrying in %.2fs", err, delay)
                # Retry after the delay, or at once when the clique changes meanwhile.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._kick.wait()
                self._kick.set()
                continue
            attempt = 0

    async def _sync(self) -> None:
        """One attempt to make our entry true in the latest clique we know."""
        ident = self._ident
        current = self._latest
        if current is None:
            if self._index is not None and await self._domain_going():
                return  # the CD's teardown deleted our clique: not ours to create again
            fresh = ComputeDomainClique.new(
                domain_uid=ident.domain_uid,
                clique_id=ident.clique_id,
                namespace=ident.pod_namespace,
            )
            want = cliqueentry.desired(fresh, ident, self._max, self._status, self._co_owner)
            await self._write(want, create=True)
            return
        if current.domain_uid != ident.domain_uid:
            # Not ours to touch: a clique of that name always carries our CD's UID.
            self._log.warning(
                "clique %s is labelled for CD %r; ignoring", current.name, current.domain_uid
            )
            return
        patch = cliqueentry.status_patch(current, ident, self._max, self._status, self._co_owner)
        want = cliqueentry.desired(current, ident, self._max, self._status, self._co_owner)
        if patch is not None:
            await self._patch_status(patch)
        elif want.to_dict() != current.to_dict():
            await self._write(want, create=False)
        if self._full_reported:
            self._full_reported = False
            self._log.info("clique %s has a free slot again; joined", current.name)

    async def _domain_going(self) -> bool:
        """Our CD is being deleted or gone (its clique was deleted by its teardown)."""
        ident = self._ident
        if not ident.domain_name or not ident.domain_namespace:
            return False
        going = await kubeio.domain_going(
            self._client,
            namespace=ident.domain_namespace,
            name=ident.domain_name,
            uid=ident.domain_uid,
        )
        if going and not self._teardown_seen:
            self._teardown_seen = True
            self._log.info(
                "clique %s was deleted while ComputeDomain %s is being deleted; not creating "
                "it again",
                ident.clique_name,
                ident.cd,
            )
        return going

    async def _write(self, want: ComputeDomainClique, *, create: bool) -> None:
        verb = metrics.CREATE if create else metrics.UPDATE
        try:
            if create:
                raw = await self._client.create(want.to_resource())
            else:
                raw = await self._client.replace(want.to_resource())
        except (httpx.HTTPError, OSError) as err:
            classified = kubeio.classify(err, f"{verb} clique {want.name}")
            if kubeio.status_code(err) == 409:
                self._meter.clique_conflict(verb)
            if kubeio.status_code(err) in (404, 409):
                await self._reread()  # lost a race: take the server's state and try again
            raise classified from err
        self._observe(ComputeDomainClique.from_resource(raw), raw)

    async def _patch_status(self, ops: list[dict[str, Any]]) -> None:
        """Our readiness alone, by JSON patch (``cliqueentry.status_patch``)."""
        name = self._ident.clique_name
        try:
            raw = await self._client.patch(
                ComputeDomainCliqueResource,
                name,
                ops,
                namespace=self._ident.pod_namespace,
                patch_type=PatchType.JSON,
            )
        except (httpx.HTTPError, OSError) as err:
            classified = kubeio.classify(err, f"patch our status into clique {name}")
            if kubeio.status_code(err) in (404, 409, 422):
                # Our entry moved (a test failed) or the clique is gone: read it again; the
                # next attempt takes the full update if the patch no longer fits.
                await self._reread()
                raise errors.TemporaryError(str(classified)) from err
            raise classified from err
        self._observe(ComputeDomainClique.from_resource(raw), raw)

    async def _reread(self) -> None:
        """Replace what we know with a fresh read (None when the clique does not exist)."""
        try:
            raw = await self._client.get(
                ComputeDomainCliqueResource,
                self._ident.clique_name,
                namespace=self._ident.pod_namespace,
            )
        except (httpx.HTTPError, OSError) as err:
            if kubeio.status_code(err) == 404:
                self._latest = None
                return
            raise kubeio.classify(err, f"read clique {self._ident.clique_name}") from err
        self._latest = None  # a fresh read always wins over what we had
        self._observe(ComputeDomainClique.from_resource(raw), raw)

    def _report_full(self, err: CliqueFullError) -> None:
        if self._full_reported:
            return
        self._full_reported = True
        message = (
            f"ComputeDomain {self._ident.cd}: clique {self._ident.clique_name} is full "
            f"(all {self._max} slots taken, MAX_NODES_PER_IMEX_DOMAIN={self._max}); node "
            f"{self._ident.node_name} cannot join the IMEX domain and stays NotReady until a "
            "slot frees up"
        )
        self._log.error("%s (%s)", message, err)
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
                await self._reread()
                current = self._latest
                want = (
                    cliqueentry.deregistered(current, self._ident) if current is not None else None
                )
                if want is None:
                    return
                try:
                    await self._client.replace(want.to_resource())
                except (httpx.HTTPError, OSError) as err:
                    raise kubeio.classify(err, f"update clique {want.name}") from err
                # NVIDIA's tests grep "Successfully removed daemon" + "from ComputeDomain ns/name".
                self._log.info(
                    "removed our entry from clique %s: Successfully removed daemon of node %s "
                    "(IP %s), detached from ComputeDomain %s",
                    want.name,
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
