"""One ComputeDomain's reconcile: make its objects exist and its status true.

For a live CD (``deletionTimestamp`` unset), in order, each step independent of the others
once the finalizer is in place:
1. its isolation scope (``scope.admit``) and our finalizer on the CD, in one merge patch with
   the read resourceVersion (precondition for creating anything): a new CD gets its scope
   fixed (the cluster default written when it names none). A CD the controller refuses to serve
   (a scope annotation naming no scope; perClique without resident agents) gets neither, only
   a NotReady status and a Warning Event; a later edit of the annotation gets the ``ImexScope``
   condition and a Warning Event while the fixed scope is served;
2. the daemon ResourceClaimTemplate, then the DaemonSet, in the driver namespace (not with
   resident agents, ``ControllerSettings.imex_agents``: the agent pod on a labelled node
   serves the CD and carries its label, so the caches see it as that node's daemon pod; never
   for a per-clique CD, which the clique's shared IMEX serves);
3. the workload ResourceClaimTemplate in the CD's namespace (a per-clique CD's selects free or
   shared nodes, ``sharedimex.channel_selector``; one with ``allocationMode: All`` gets none: it
   would hold every channel of the shared IMEX domain, so it is NotReady with reason
   ``AllocationModeAllNotIsolated`` and a Warning Event). A same-named template that is not
   labelled for this CD is never touched: a ``TemplateNameConflict`` Event, the status
   NotReady with reason ``TemplateConflict``, and a retry with backoff (the other template may
   go away);
4. the status, derived from cache (``status.derive``, or ``sharedstatus.derive`` for a
   per-clique CD) and written only when it differs, as one JSON-patch replace of ``/status``;
   node transitions become Events;
5. (beside the reconcile, with its own queue: clique indices and pruning, ``assigner``).
Existing objects are never updated (spec is immutable), with one exception: the DaemonSet's
placement follows the CD's warm-nodes annotation (``warm``: it labels the selected nodes, and the
DaemonSet's node affinity adds them); ours found terminating while the CD
lives lose our finalizer so they go, and are created again on the next pass. A DaemonSet that
NVIDIA's controller made is replaced by ours, its running daemons adopted (``takeover``).

A CD being deleted *waits for its workload*, as Kubernetes' PVC protection does: while any of
its workload claims is allocated to a node (cache first; when the cache says none, a live list
of the claims in the CD's namespace confirms it), its finalizer stays, its workload template is
deleted (no new claims), its daemons keep running (the job keeps its IMEX domain), its status
says ``Deleting``/``WaitingForWorkload`` naming the pods, and a ``WaitingForWorkload`` Event
names them when the wait begins and again when a pod not named before holds a claim (pods
leaving are progress the status shows, not news). Once no claim is left,
``teardown.finalize`` runs. A UID with no cached CD but leftovers goes to ``teardown.orphan``.
Failures are collected and the first is raised after all steps ran, so the work queue retries
with backoff while every other step (and every other CD) proceeds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.resource_v1 import ResourceClaim, ResourceClaimTemplate

from compute_domains.api import conditions, names, nodemark, sharedimex
from compute_domains.api.computedomain import ComputeDomain, DecodeError
from compute_domains.controller import (
    caches,
    claims,
    claimtemplates,
    config,
    daemonset,
    events,
    kubeapi,
    metrics,
    scope,
    statussync,
    takeover,
    teardown,
    warm,
)
from compute_domains.infra import errors

logger = logging.getLogger(__name__)


class Reconciler:
    """Reconciles one CD UID at a time (the work queue guarantees one worker per UID)."""

    def __init__(
        self,
        *,
        api: kubeapi.Api,
        cache: caches.Caches,
        settings: config.ControllerSettings,
        recorder: events.EventRecorder,
        meter: metrics.Metrics,
        enqueue: Callable[[str, float], None],
    ) -> None:
        self._api = api
        self._cache = cache
        self._settings = settings
        self._events = recorder
        self._metrics = meter
        self._teardown = teardown.Teardown(
            api,
            namespace=settings.namespace,
            channel_nodes=lambda uid: [n.metadata.name or "" for n in cache.channel_nodes_of(uid)],  # type: ignore[union-attr]
            channel_registries=lambda uid: [r.metadata.name for r in cache.registries_of(uid)],
            annotated_nodes=lambda uid: [
                n.metadata.name or ""  # type: ignore[union-attr]
                for n in cache.nodes.by_index(caches.CD_INDEX, uid)
                if nodemark.KEY in (n.metadata.annotations or {})  # type: ignore[union-attr]
            ],
        )
        self._warm = warm.WarmNodes(api, recorder)
        self._announced: dict[str, frozenset[str]] = {}
        """CD UID → the pods a ``WaitingForWorkload`` Event named (while its deletion waits)."""
        self._scopes = scope.Scopes(api, cache, settings, recorder)
        self._status = statussync.StatusSync(
            api=api,
            cache=cache,
            settings=settings,
            recorder=recorder,
            meter=meter,
            enqueue=enqueue,
        )

    async def reconcile(self, domain_uid: str) -> None:
        """Bring CD ``domain_uid`` (or its leftovers) to the desired state.

        Raises:
            errors.TemporaryError: something failed; retry later.
        """
        raw = self._cache.cd(domain_uid)
        if raw is None:
            self._announced.pop(domain_uid, None)
            self._scopes.forget(domain_uid)
            self._warm.forget(domain_uid)
            if self._cache.has_leftovers(domain_uid):
                await self._teardown.orphan(domain_uid)
            return
        log = {"cd": f"{raw.metadata.namespace}/{raw.metadata.name}"}
        if raw.metadata.deletionTimestamp is not None:
            if names.FINALIZER in (raw.metadata.finalizers or []):
                if await self._wait_for_workload(raw):
                    return
                self._announced.pop(domain_uid, None)
                self._scopes.forget(domain_uid)
                await self._teardown.finalize(raw, shared=_shared(raw))
                logger.info("ComputeDomain deleted; everything it owned is gone", extra=log)
            return
        try:
            cd = ComputeDomain.from_resource(raw)
        except DecodeError as err:
            await self._events.emit(
                events.target(raw), events.WARNING, events.INVALID_SPEC, str(err)
            )
            raise errors.PermanentError(str(err)) from err
        admission, refused = await self._scopes.admit(raw, cd)
        shared = admission.scope is sharedimex.Scope.PER_CLIQUE
        if admission.refusal is not None:  # nothing is fixed or created: only say why
            refusal = admission.refusal
            await self._status.sync(cd, refusal=(refusal.reason, refusal.message))
            return
        failures: list[errors.ComputeDomainsError] = []
        conflict = ""
        # Warm spares hold a node for one CD: the shared IMEX serves a per-clique CD on every
        # node of the clique already, so its annotation is ignored (and labels it left go).
        selector = None if shared else warm.annotation(raw)
        warm_plan = warm.plan(domain_uid, selector, self._node_labels())
        try:
            if self._settings.per_cd_daemons and not shared:  # else no per-CD objects
                await self._ensure_daemon_objects(cd, warm_nodes=selector is not None)
        except errors.ComputeDomainsError as err:
            failures.append(err)
        try:
            nodes = {n.metadata.name or "": n for n in self._cache.nodes.objects() if n.metadata}
            await self._warm.apply(domain_uid, warm_plan, nodes, events.target(raw))
        except errors.ComputeDomainsError as err:
            failures.append(err)
        try:
            if refused is None:
                conflict = await self._ensure_workload_template(cd, shared=shared)
        except errors.ComputeDomainsError as err:
            failures.append(err)
        generation = cd.metadata.generation or 0
        try:
            await self._status.sync(
                cd,
                shared=shared,
                template_conflict=conflict,
                extra=(warm.condition(warm_plan, generation), admission.condition(generation)),
                refusal=None if refused is None else (refused.reason, refused.message),
            )
        except errors.ComputeDomainsError as err:
            failures.append(err)
        if conflict:
            failures.append(errors.TemporaryError(conflict))  # the other template may go away
        if failures:
            raise errors.TemporaryError(str(failures[0])) from failures[0]

    async def _wait_for_workload(self, raw: Any) -> bool:
        """While pods hold claims of the deleted CD ``raw``: keep it, say so; True if waiting."""
        domain_uid = raw.metadata.uid
        waited_for = claims.using_pods(self._cache.workload_of(domain_uid))
        if not waited_for:
            # The cache may lag behind a claim allocated a moment ago: ask the API server.
            live = await self._api.list(ResourceClaim, namespace=raw.metadata.namespace)
            mine = [c for c in live if domain_uid in claims.domain_uids(c)]
            waited_for = claims.using_pods(claims.WorkloadClaim.from_claim(c) for c in mine)
        if not waited_for:
            return False
        # No new claims from its template while it waits (pods of a controller that replaces
        # them stay Pending); its daemons stay, so the running job keeps its IMEX domain.
        await self._teardown.workload_templates(domain_uid)
        try:
            cd = ComputeDomain.from_resource(raw)
        except DecodeError:
            cd = None
        if cd is not None:
            selector = warm.annotation(raw)
            cond = warm.condition(
                warm.plan(domain_uid, selector, self._node_labels()), cd.metadata.generation or 0
            )
            derived = await self._status.sync(
                cd, shared=_shared(raw), waited_for=waited_for, extra=(cond,)
            )
            cond = derived.condition(conditions.DELETING)
            message = cond.message if cond is not None else ""
        else:
            message = f"deletion waits for pods that still hold its claims: {', '.join(waited_for)}"
        announced = self._announced.get(domain_uid, frozenset())
        if message and not set(waited_for) <= announced:
            self._announced[domain_uid] = announced | set(waited_for)
            logger.info(message, extra={"cd": f"{raw.metadata.namespace}/{raw.metadata.name}"})
            await self._events.emit(
                events.target(raw), events.NORMAL, events.WAITING_FOR_WORKLOAD, message
            )
        return True

    def _node_labels(self) -> list[tuple[str, dict[str, str]]]:
        return [
            (n.metadata.name or "", nodemark.effective_labels(n.metadata))
            for n in self._cache.nodes.objects()
            if n.metadata is not None
        ]

    # ---- owned objects -------------------------------------------------------------------

    async def _release_terminating(self, res: Any, obj: Any) -> None:
        meta = obj.metadata
        await self._api.remove_finalizer(res, meta.name, names.FINALIZER, namespace=meta.namespace)

    async def _ensure_daemon_objects(self, cd: ComputeDomain, *, warm_nodes: bool) -> None:
        ns = self._settings.namespace
        existing = self._cache.templates_of(cd.uid, names.TARGET_DAEMON)
        if not existing:
            rct = claimtemplates.daemon_template(domain_uid=cd.uid, namespace=ns)
            await self._create(rct, self._cache.templates)
        elif existing[0].metadata.deletionTimestamp is not None:  # type: ignore[union-attr]
            await self._release_terminating(ResourceClaimTemplate, existing[0])
        found = self._cache.daemonsets.by_index(caches.CD_INDEX, cd.uid)
        if not found:
            ds = daemonset.render(
                domain_uid=cd.uid, namespace=ns, settings=self._settings.daemon, warm=warm_nodes
            )
            kept = takeover.nvidias_pods(self._cache.pods.by_index(caches.CD_INDEX, cd.uid))
            ds = takeover.keep_running(ds) if kept else ds
            if await self._create(ds, self._cache.daemonsets):
                message = f"created DaemonSet {ns}/{ds.metadata.name} for the IMEX daemons"  # type: ignore[union-attr]
                if kept:
                    message += f"; it adopts NVIDIA's running daemons, kept: {', '.join(kept)}"
                logger.info(message, extra={"cd": f"{cd.namespace}/{cd.name}"})
                await self._events.emit(
                    events.target(cd), events.NORMAL, events.DAEMONSET_CREATED, message
                )
        elif found[0].metadata.deletionTimestamp is not None:  # type: ignore[union-attr]
            await self._release_terminating(DaemonSet, found[0])
        elif takeover.is_nvidias(found[0]):
            logger.info(
                "replacing NVIDIA's DaemonSet %s by ours; its running daemons stay",
                found[0].metadata.name,  # type: ignore[union-attr]
                extra={"cd": f"{cd.namespace}/{cd.name}"},
            )
            await takeover.release(self._api, found[0])
        elif daemonset.is_warm(found[0]) != warm_nodes:
            await self._replace_placement(cd, found[0], warm_nodes=warm_nodes)

    async def _replace_placement(
        self, cd: ComputeDomain, ds: DaemonSet, *, warm_nodes: bool
    ) -> None:
        """The warm-nodes annotation came or went: re-render the DaemonSet's placement (its
        pods roll; docs/warm-spares.md says to set the annotation at creation)."""
        meta = ds.metadata
        assert meta is not None and meta.name is not None
        patch = daemonset.placement_patch(cd.uid, warm=warm_nodes)
        updated = await self._api.patch(DaemonSet, meta.name, patch, namespace=meta.namespace)
        self._cache.daemonsets.observe(updated)
        logger.info(
            "DaemonSet %s placement re-rendered (warm nodes %s)",
            meta.name,
            "on" if warm_nodes else "off",
            extra={"cd": f"{cd.namespace}/{cd.name}"},
        )

    async def _create(self, obj: Any, cache: Any) -> bool:
        try:
            created = await self._api.create(obj)
        except kubeapi.AlreadyExists:
            return False  # ours, not yet in the cache (the name contains the CD's UID)
        cache.observe(created)
        return True

    async def _ensure_workload_template(self, cd: ComputeDomain, *, shared: bool) -> str:
        """Make the workload template exist; returns why it cannot ("" when it is ours)."""
        existing = self._cache.templates_of(cd.uid, names.TARGET_WORKLOAD)
        if existing:
            if existing[0].metadata.deletionTimestamp is not None:  # type: ignore[union-attr]
                await self._release_terminating(ResourceClaimTemplate, existing[0])
            return ""
        rct = claimtemplates.workload_template(cd, shared=shared)
        try:
            created = await self._api.create(rct)
        except kubeapi.AlreadyExists:
            name = cd.spec.channel.resource_claim_template.name
            other: Any = await self._api.get(ResourceClaimTemplate, name, namespace=cd.namespace)
            if other is not None and _label_of(other) == cd.uid:
                self._cache.templates.observe(other)
                return ""
            message = (
                f"ResourceClaimTemplate {cd.namespace}/{name} already exists and does not "
                "belong to this ComputeDomain; rename one of them"
            )
            await self._events.emit(
                events.target(cd), events.WARNING, events.TEMPLATE_CONFLICT, message
            )
            return message
        self._cache.templates.observe(created)
        return ""


def _shared(raw: Any) -> bool:
    """Whether a cached CD was admitted in the per-clique scope."""
    return scope.fixed_scope(raw.metadata.annotations) is sharedimex.Scope.PER_CLIQUE


def _label_of(obj: Any) -> str | None:
    value: str | None = (obj.metadata.labels or {}).get(names.COMPUTE_DOMAIN_LABEL)
    return value
