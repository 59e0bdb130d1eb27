"""Kubernetes Events (core/v1) on ComputeDomains: what a person needs to know, de-duplicated.

The reasons people filter on, and the ComputeDomain an Event is about; recording, aggregation
(a retried template name conflict shows as one Event with a growing count), the memory bound
and the never-fail rule are ``infra.kube.events.Recorder``'s, shared with every component.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from lightkube.models.core_v1 import ObjectReference

from compute_domains.api import names
from compute_domains.controller import kubeapi
from compute_domains.infra.kube import events as kube_events

COMPONENT: Final = "compute-domain-controller"
"""``source.component`` / ``reportingComponent`` of our Events."""
NORMAL: Final = kube_events.NORMAL
WARNING: Final = kube_events.WARNING

# Reasons (CamelCase, stable: people filter on them).
DAEMONSET_CREATED: Final = "DaemonSetCreated"
NODE_JOINED: Final = "NodeJoined"
NODE_LEFT: Final = "NodeLeft"
NODE_NOT_READY: Final = "NodeNotReady"
"""A listed node's entry went from Ready to NotReady (node, daemon gone or restarting)."""
NODE_READY: Final = "NodeReady"
"""A member node that had gone NotReady is Ready again."""
CLIQUE_FULL: Final = "CliqueFull"
TEMPLATE_CONFLICT: Final = "TemplateNameConflict"
INVALID_SPEC: Final = "InvalidSpec"
WAITING_FOR_WORKLOAD: Final = "WaitingForWorkload"
"""A deleted ComputeDomain waits for the pods that still hold its workload claims."""
POD_REPLACED: Final = "PodReplaced"
"""A pod whose channel claim landed on a node another CD holds was deleted, so that its
controller recreates it where the scheduler finds room (``replacer``); on the pod and its CD."""
INVALID_IMEX_SCOPE: Final = "InvalidImexScope"
"""The scope annotation names no scope; nothing is created for the CD (``scope``)."""
IMEX_SCOPE_NEEDS_RESIDENT_AGENTS: Final = "ImexScopeNeedsResidentAgents"
"""A perClique CD while the controller runs per-CD DaemonSets; nothing is created for it."""
IMEX_SCOPE_FIXED: Final = "ImexScopeFixed"
"""The scope annotation was edited after creation: refused, the fixed scope is served."""
ALLOCATION_MODE_ALL_NOT_ISOLATED: Final = "AllocationModeAllNotIsolated"
"""A per-clique CD asks for all channels: its workload template is not created."""
NODE_HELD: Final = "NodeHeldByAnotherComputeDomain"
"""A pod waits on a node another CD holds and cannot be re-placed (no controller, ...)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """The ComputeDomain an Event is about."""

    namespace: str
    name: str
    uid: str

    def reference(self) -> ObjectReference:
        """The ``involvedObject`` reference."""
        return ObjectReference(
            apiVersion=names.API_VERSION,
            kind=names.COMPUTE_DOMAIN_KIND,
            namespace=self.namespace,
            name=self.name,
            uid=self.uid,
        )


def target(cd: Any) -> Target:
    """The Event target of a CD (typed model or raw object)."""
    meta = cd.metadata
    return Target(namespace=meta.namespace or "", name=meta.name or "", uid=meta.uid or "")


class EventRecorder:
    """Creates and aggregates Events for one controller instance (``infra.kube.events``)."""

    def __init__(self, api: kubeapi.Api, *, instance: str, remember: int = 1024) -> None:
        self._recorder = kube_events.Recorder(
            api, component=COMPONENT, instance=instance, remember=remember
        )

    async def emit(self, target: Target, kind: str, reason: str, message: str) -> None:
        """Record one occurrence; never raises (except on cancellation)."""
        await self._recorder.emit(target.reference(), kind, reason, message)

    async def emit_pod(
        self, *, namespace: str, name: str, uid: str, kind: str, reason: str, message: str
    ) -> None:
        """Record one occurrence on a pod (``kubectl describe pod`` shows it)."""
        ref = ObjectReference(apiVersion="v1", kind="Pod", namespace=namespace, name=name, uid=uid)
        await self._recorder.emit(ref, kind, reason, message)
