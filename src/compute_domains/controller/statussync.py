"""The status half of a reconcile: derive, write when changed, announce.

Reads only the caches (cliques, daemon pods, workload claims, nodes of one CD) and derives the
status with ``status.derive`` from them and the stored status (which keeps the entries of
members whose daemon is gone, and says who was a member). ``statuswrite`` writes it: conditions
keep their ``lastTransitionTime`` while their status holds, the write is one JSON-patch replace
of ``/status`` made only when the stored status differs and put back into the cache at once. A
change that is only progress (``statuschange.urgent``: an entry appeared, got its index or turned
Ready while the CD's verdict holds) is written at most once per ``status_progress_interval_s``
per CD (a sooner one re-enqueues the CD for when the interval is over), so 18 daemons
registering and turning Ready one by one make a few writes, not 36; a verdict change (Ready, a
reason, a Ready member lost) is written at once. Node transitions between the stored and the
written status become Events there: ``NodeJoined`` and ``NodeLeft`` (one Event for the nodes of
one write that stand at the same place), ``NodeNotReady`` (an entry went from Ready to
NotReady, with what is wrong) and ``NodeReady`` (a member that had gone NotReady is back).

A per-clique CD (``shared``) is derived by ``sharedstatus`` instead, from the Nodes annotated
with its channel and their cliques' shared registries (all cached); the write, the pacing and
the Events are the same. A node of it whose shared IMEX cannot start for a reason its agent
wrote into the registry (``sharedstatus.blocked``: a host ``nvidia-imex.service`` holding the
session) gets a Warning with that reason (``ImexSessionInUse``) on the CD, once per CD, node
and reason while it lasts (the agent's pod Event counts the retries).

Clique entries (indices, and pruning those of dead daemons) are the index assigner's
(``assigner``); this module only reads them. A CD with a daemon whose clique is full (every
index taken, the pod's node not listed) gets a ``CliqueFull`` Event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from compute_domains.api import conditions, names, sharedimex
from compute_domains.api.clique import ComputeDomainClique
from compute_domains.api.computedomain import (
    ComputeDomain,
    ComputeDomainStatus,
    DecodeError,
)
from compute_domains.controller import (
    caches,
    config,
    events,
    heldnodes,
    kubeapi,
    metrics,
    sharedstatus,
    status,
    statuswrite,
)
from compute_domains.infra import errors

logger = logging.getLogger(__name__)


class StatusSync:
    """Keeps ``status`` of CDs true; one call per CD per reconcile."""

    def __init__(
        self,
        *,
        api: kubeapi.Api,
        cache: caches.Caches,
        settings: config.ControllerSettings,
        recorder: events.EventRecorder,
        meter: metrics.Metrics,
        enqueue: Callable[[str, float], None],
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._cache = cache
        self._settings = settings
        self._events = recorder
        self._writer = statuswrite.StatusWriter(
            api=api,
            cache=cache,
            interval=settings.status_progress_interval_s,
            recorder=recorder,
            meter=meter,
            enqueue=enqueue,
            clock=clock or (lambda: asyncio.get_running_loop().time()),
            log=logger,
        )
        self._told_blocked: dict[str, set[tuple[str, str, str]]] = {}
        """CD UID → (node, reason, message) of the blocked notes told on it (while they last)."""

    async def sync(
        self,
        cd: ComputeDomain,
        *,
        shared: bool = False,
        template_conflict: str = "",
        waited_for: list[str] | None = None,
        extra: Sequence[conditions.Condition | None] = (),
        refusal: tuple[str, str] | None = None,
    ) -> ComputeDomainStatus:
        """Write CD ``cd``'s status if it changed.

        ``shared``: the CD is served in the per-clique scope (``sharedstatus`` derives it);
        ``template_conflict`` is the reason its workload template could not be made;
        ``waited_for`` the pods its deletion waits for (None while it is not being deleted);
        ``extra`` conditions judged elsewhere (``warm.condition``, the ``ImexScope`` one; None
        entries are skipped); ``refusal`` the ``(reason, message)`` of a CD served not at all.
        Returns the status it derived.

        Raises:
            errors.ComputeDomainsError: the status write failed.
        """
        workload = self._cache.workload_of(cd.uid)
        previous = self._stored(cd)
        waiting = self._cache.pending_of(cd.uid)
        max_nodes = self._settings.daemon.max_nodes_per_imex_domain
        common: dict[str, Any] = {
            "num_nodes": cd.spec.num_nodes,
            "workload": workload,
            "previous": previous,
            "max_nodes": max_nodes,
            "template_conflict": template_conflict,
            "waited_for": waited_for,
            "generation": cd.metadata.generation or 0,
            "extra": tuple(c for c in extra if c is not None),
            "waiting": waiting,
            "holders": self._cache.holders_besides(cd.uid) if waiting else (),
            "refusal": refusal,
        }
        nodes = {c.node for c in workload if c.node}
        nodes |= {n.name for n in (previous.nodes if previous is not None else ())}
        full: list[tuple[str, str]] = []
        blocked: dict[str, sharedimex.Blocked] = {}
        if shared:
            served = self._served(cd.uid)
            nodes |= {s.name for s in served}
            node_ready, node_cliques, held_by = self._node_facts(cd.uid, nodes, workload, True)
            cliques = {s.clique_id for s in served} | set(node_cliques.values())
            registries = self._registries(cliques)
            derived = sharedstatus.derive(
                served=served,
                registries=registries,
                channels=self._channels(cd.uid),
                node_ready=node_ready,
                agents=self._cache.agents.of(nodes),
                node_cliques=node_cliques,
                held_by=held_by,
                **common,
            )
            blocked = {
                n: b
                for n, b in sharedstatus.blocked(served, registries).items()
                if n in derived.why
            }
        else:
            own = self._cliques(cd.uid)
            pods = [
                status.DaemonPod.from_pod(p)
                for p in self._cache.pods.by_index(caches.CD_INDEX, cd.uid)
            ]
            nodes |= {n.name for c in own for n in c.to_nodes()} | {p.node_name for p in pods}
            node_ready, node_cliques, held_by = self._node_facts(cd.uid, nodes, workload, False)
            derived = status.derive(
                cliques=own,
                pods=pods,
                node_ready=node_ready,
                node_cliques=node_cliques,
                held_by=held_by,
                **common,
            )
            full = status.full_clique_nodes(own, pods, max_nodes)
        failures: list[errors.ComputeDomainsError] = []
        try:
            await self._writer.write(cd, previous, derived)
        except errors.ComputeDomainsError as err:
            failures.append(err)
        for full_node, clique_id in full:
            message = (
                f"clique {clique_id} is full ({max_nodes} nodes); the daemon on node "
                f"{full_node} cannot join this ComputeDomain"
            )
            await self._events.emit(events.target(cd), events.WARNING, events.CLIQUE_FULL, message)
        await self._tell_blocked(cd, blocked)
        if failures:
            raise failures[0]
        return derived.status

    async def _tell_blocked(
        self, cd: ComputeDomain, blocked: dict[str, sharedimex.Blocked]
    ) -> None:
        """A Warning on the CD for each node newly blocked (its note's reason and message)."""
        now = {(node, b.reason, b.message) for node, b in blocked.items()}
        told = self._told_blocked.pop(cd.uid, set())
        if now:
            self._told_blocked[cd.uid] = now
        for node, reason, message in sorted(now - told):
            text = (
                f"node {node}: {message}; the node's shared IMEX serves this ComputeDomain, and "
                "its resident agent keeps retrying with backoff"
            )
            logger.warning(text, extra={"cd": f"{cd.namespace}/{cd.name}", "node": node})
            await self._events.emit(
                events.target(cd), events.WARNING, reason or "ImexBlocked", text
            )

    def _node_facts(
        self, domain_uid: str, nodes: set[str], workload: list[Any], shared: bool
    ) -> tuple[dict[str, bool], dict[str, str], dict[str, str]]:
        """Readiness, clique label and (where another holder keeps the CD off) the held-by
        words of each named node that exists."""
        node_ready: dict[str, bool] = {}
        node_cliques: dict[str, str] = {}
        held_by: dict[str, str] = {}
        for name in nodes - {""}:
            node = self._cache.nodes.get("", name)
            if node is None:
                continue
            node_ready[name] = status.node_is_ready(node)
            labels = (node.metadata.labels if node.metadata else None) or {}
            node_cliques[name] = labels.get(names.GPU_CLIQUE_LABEL, "")
            holder = heldnodes.holder(node)
            if heldnodes.keeps_off(holder, domain_uid, shared=shared):
                held_by[name] = heldnodes.held_text(
                    self._cd_name(holder),
                    [c for c in workload if c.node == name],
                    shared=holder == sharedimex.SHARED_HOLDER,
                )
        return node_ready, node_cliques, held_by

    def _served(self, domain_uid: str) -> list[sharedstatus.Served]:
        """The Nodes annotated with CD ``domain_uid``'s channel."""
        out = []
        for node in self._cache.channel_nodes_of(domain_uid):
            meta = node.metadata
            if meta is None or not meta.name:
                continue
            channel = sharedimex.channels(meta.annotations).get(domain_uid)
            if channel is None:
                continue
            clique = (meta.labels or {}).get(names.GPU_CLIQUE_LABEL, "")
            out.append(sharedstatus.Served(name=meta.name, clique_id=clique, channel=channel))
        return out

    def _registries(self, clique_ids: set[str]) -> dict[str, ComputeDomainClique]:
        """Clique ID → its shared registry, for the cached ones."""
        out = {}
        for clique_id in clique_ids - {""}:
            raw = self._cache.registry(clique_id)
            if raw is None:
                continue
            try:
                out[clique_id] = ComputeDomainClique.from_resource(raw)
            except DecodeError as err:
                logger.warning("ignoring malformed registry %s: %s", raw.metadata.name, err)
        return out

    def _channels(self, domain_uid: str) -> dict[str, int]:
        """Clique ID → CD ``domain_uid``'s channel in that clique's registry."""
        out = {}
        for raw in self._cache.registries_of(domain_uid):
            channel = sharedimex.channels(raw.metadata.annotations).get(domain_uid)
            clique = (raw.metadata.labels or {}).get(names.CLIQUE_ID_LABEL) or raw.metadata.name
            if channel is not None:
                out[str(clique)] = channel
        return out

    def _cd_name(self, domain_uid: str) -> str:
        raw = self._cache.cd(domain_uid)
        if raw is None:
            return domain_uid
        return f"{raw.metadata.namespace}/{raw.metadata.name} ({domain_uid})"

    def _stored(self, cd: ComputeDomain) -> ComputeDomainStatus | None:
        """The status as stored now (the cache, which holds our own last write)."""
        raw = self._cache.cd(cd.uid)
        current = raw.get("status") if raw is not None else None
        if raw is None or not current:
            return None
        version = raw.metadata.resourceVersion
        if version and version == cd.metadata.resourceVersion:
            return cd.status  # ``cd`` was decoded from this very version: no second decode
        try:
            return ComputeDomainStatus.from_dict(current)
        except DecodeError as err:
            logger.warning("ignoring malformed stored status: %s", err)
            return None

    def _cliques(self, domain_uid: str) -> list[ComputeDomainClique]:
        out = []
        for raw in self._cache.cliques.by_index(caches.CD_INDEX, domain_uid):
            try:
                out.append(self._cache.clique_of(raw))
            except DecodeError as err:
                logger.warning("ignoring malformed clique %s: %s", raw.metadata.name, err)
        return out
