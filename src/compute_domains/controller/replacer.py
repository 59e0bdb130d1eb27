"""Re-place the pods whose channel claim landed on a node another ComputeDomain holds (issue 29).

The decisions are ``heldnodes``'s; this is the component that acts on them. It runs in the
leader's term beside the reconcile workers, with a work queue of its own keyed by node name:
a node is looked at when a workload claim allocated on it changes (allocated, reserved for a
pod) and when its CD or warm-spare label changes; the sweep also enqueues every labelled node
(a new leader catches up on conflicts it did not see happen). One pass over a node:

1. its holder and the conflicting claims, from the caches; nothing when it is free (a node in
   the per-clique scope is held against per-domain CDs only, ``heldnodes.keeps_off``);
2. for each conflicting pod not handled before (once per pod UID, remembered for the term): a
   fresh read of the pod, and ``heldnodes.decide``. ``SKIP`` of a pod not yet bound retries
   the node later (it is about to be bound);
3. ``REPLACE``: first a fresh read of the node (its holder must still be that CD: the cache may
   lag behind a holder that left) and of its ResourceSlice, which must already advertise the
   holder, else the new pod's claim could be allocated on the same node again; the node is
   retried shortly until it does. Then a Warning Event ``PodReplaced`` on the pod and on its
   CD, and an eviction with the pod's UID as precondition (a replacement pod of the same name
   is never deleted; a PodDisruptionBudget is honoured: a refusal is retried with backoff);
4. ``WAIT``: a Warning Event ``NodeHeldByAnotherComputeDomain`` on the pod and its CD, naming
   the holder and saying why the pod cannot move; the pod waits for the holder to leave.

Never loops: a pod UID is acted on at most once; a running pod (its claim prepared) is never
touched; each eviction makes the owner create one new pod, whose claim the scheduler can only
put on the node once its holder is gone.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import ResourceSlice

from compute_domains.api import names, sharedimex
from compute_domains.controller import caches, config, events, heldnodes, kubeapi, scope
from compute_domains.infra import errors, workqueue

logger = logging.getLogger(__name__)

REMEMBER = 4096
"""Pod UIDs remembered as handled (a bound on memory; the oldest are forgotten first)."""
SLICE_WAIT_S = 0.5
"""Delay before a node is looked at again while a loser is not bound yet or the node's slice
does not advertise its holder yet: both come within seconds, so a fixed short step, not the
growing backoff of a failure (which would add seconds to every re-placement)."""
WAIT_STEPS = 120
"""Fixed steps (a minute) before such a wait counts as failing and backs off like one."""


class _NotYet(errors.TemporaryError):
    """The pass must look again shortly: a pod about to be bound, a slice about to show."""

    def __init__(self, message: str) -> None:
        super().__init__(message, delay=SLICE_WAIT_S)


class Replacer:
    """Re-places (or reports) pods waiting on a node another CD holds; see the module docstring."""

    def __init__(
        self,
        *,
        api: kubeapi.Api,
        cache: caches.Caches,
        settings: config.ControllerSettings,
        recorder: events.EventRecorder,
    ) -> None:
        self._api = api
        self._cache = cache
        self._recorder = recorder
        self.queue: workqueue.WorkQueue[str] = workqueue.WorkQueue(retry_backoff=settings.retry)
        self._handled: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._steps: dict[str, int] = {}

    def enqueue(self, node: str) -> None:
        """Look at ``node`` soon."""
        if node:
            self.queue.add(node)

    async def run(self) -> None:
        """Work the queue until cancelled (start once the caches are filled)."""
        while True:
            node = await self.queue.get()
            try:
                await self.sync(node)
                self.queue.forget(node)
                self._steps.pop(node, None)
            except _NotYet as err:
                steps = self._steps[node] = self._steps.get(node, 0) + 1
                if steps <= WAIT_STEPS:
                    self.queue.add(node, SLICE_WAIT_S)
                else:
                    self.queue.retry(node, SLICE_WAIT_S)
                level = logging.INFO if steps == 1 else logging.DEBUG  # once per wait
                logger.log(level, "held node %s: %s; looking again shortly", node, err)
            except errors.ComputeDomainsError as err:
                delay = self.queue.retry(
                    node, err.delay if isinstance(err, errors.TemporaryError) else None
                )
                logger.info("held node %s: %s; looking again in %.2fs", node, err, delay)
            except Exception:
                self.queue.retry(node)
                logger.exception("held node %s: pass failed unexpectedly", node)
            finally:
                self.queue.done(node)

    async def sync(self, node: str) -> None:
        """One pass over ``node``.

        Raises:
            errors.TemporaryError: look again later (pod not bound yet, slice not republished,
                an API call failed).
        """
        cached = self._cache.nodes.get("", node)
        holder = heldnodes.holder(cached)
        allocated = self._cache.claims.by_index(caches.NODE_INDEX, node)
        later: list[errors.TemporaryError] = []
        for conflict in heldnodes.conflicts(node, holder, allocated, self._is_shared):
            if conflict.pod_uid in self._handled:
                continue
            try:
                await self._handle(conflict)
            except errors.TemporaryError as err:
                later.append(err)
        # A real failure backs off; only waits for what comes within seconds step shortly.
        failing = [e for e in later if not isinstance(e, _NotYet)]
        if failing or later:
            raise (failing or later)[0]

    async def _handle(self, conflict: heldnodes.Conflict) -> None:
        pod = await self._api.get(Pod, conflict.pod, namespace=conflict.namespace)
        decision = heldnodes.decide(conflict, pod)
        if decision.action is heldnodes.Action.SKIP:
            if pod is not None and pod.spec is not None and not pod.spec.nodeName:
                raise _NotYet(f"pod {conflict.namespace}/{conflict.pod} not bound yet")
            self._remember(conflict.pod_uid)
            return
        holder_name = heldnodes.holder_words(conflict.holder, self._cd_name)
        what = (
            f"node {conflict.node} is held by {holder_name}; pod "
            f"{conflict.namespace}/{conflict.pod} of ComputeDomain "
            f"{self._cd_name(conflict.loser)} cannot run there"
        )
        if decision.action is heldnodes.Action.WAIT:
            message = f"{what}: it waits until that one leaves, because {decision.why}"
            await self._report(conflict, events.NODE_HELD, message)
            logger.warning("%s", message, extra={"node": conflict.node})
            self._remember(conflict.pod_uid)
            return
        await self._still_held(conflict)
        message = f"{what}; pod re-placed so the scheduler can choose a free node"
        await self._report(conflict, events.POD_REPLACED, message)
        try:
            await self._api.evict(conflict.pod, namespace=conflict.namespace, uid=conflict.pod_uid)
        except kubeapi.Conflict:
            pass  # its UID changed: a replacement already stands there, which we never delete
        self._remember(conflict.pod_uid)
        logger.warning("%s", message, extra={"node": conflict.node})

    async def _still_held(self, conflict: heldnodes.Conflict) -> None:
        """Raise (temporary) unless the node is still held by the holder and its slice says so."""
        node = await self._api.get(Node, conflict.node)
        if heldnodes.holder(node) != conflict.holder:
            raise errors.TemporaryError(f"node {conflict.node} changed holder; looking again")
        name = f"{conflict.node}-{names.DRIVER_NAME}"
        resource_slice: Any = await self._api.get(ResourceSlice, name)
        if resource_slice is None or not heldnodes.advertises(resource_slice, conflict.holder):
            raise _NotYet(f"ResourceSlice {name} does not advertise holder {conflict.holder} yet")

    async def _report(self, conflict: heldnodes.Conflict, reason: str, message: str) -> None:
        await self._recorder.emit_pod(
            namespace=conflict.namespace,
            name=conflict.pod,
            uid=conflict.pod_uid,
            kind=events.WARNING,
            reason=reason,
            message=message,
        )
        cd = self._cache.cd(conflict.loser)
        if cd is not None:
            target = events.Target(
                namespace=cd.metadata.namespace, name=cd.metadata.name, uid=conflict.loser
            )
            await self._recorder.emit(target, events.WARNING, reason, message)

    def _is_shared(self, domain_uid: str) -> bool:
        """Whether CD ``domain_uid`` is served in the per-clique scope (the shared IMEX's)."""
        cd = self._cache.cd(domain_uid)
        fixed = scope.fixed_scope(cd.metadata.annotations) if cd is not None else None
        return fixed is sharedimex.Scope.PER_CLIQUE

    def _cd_name(self, domain_uid: str) -> str:
        cd = self._cache.cd(domain_uid)
        if cd is None:
            return domain_uid
        return f"{cd.metadata.namespace}/{cd.metadata.name} ({domain_uid})"

    def _remember(self, pod_uid: str) -> None:
        self._handled[pod_uid] = None
        self._handled.move_to_end(pod_uid)
        while len(self._handled) > REMEMBER:
            self._handled.popitem(last=False)
