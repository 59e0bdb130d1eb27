"""Kubernetes Events (core/v1) on ComputeDomains: what a person needs to know, de-duplicated.

The same (object, type, reason, message) seen again bumps the existing Event's ``count`` and
``lastTimestamp`` instead of creating another object, so a retried failure (a template name
conflict retried with backoff) shows as one Event with a growing count, as ``kubectl`` users
expect. The recorder remembers a bounded number of recent Events per instance.

Emitting is a non-fatal side effect: a failure is logged as a warning and never fails the
reconcile that wanted to tell something.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import uuid
from typing import Final

from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

from compute_domains.api import names
from compute_domains.controller import kubeapi
from compute_domains.infra import errors

logger = logging.getLogger(__name__)

COMPONENT: Final = "compute-domain-controller"
"""``source.component`` / ``reportingComponent`` of our Events."""
NORMAL: Final = "Normal"
WARNING: Final = "Warning"

# Reasons (CamelCase, stable: people filter on them).
DAEMONSET_CREATED: Final = "DaemonSetCreated"
NODE_JOINED: Final = "NodeJoined"
NODE_LEFT: Final = "NodeLeft"
NODE_LOST: Final = "NodeLost"
CLIQUE_FULL: Final = "CliqueFull"
TEMPLATE_CONFLICT: Final = "TemplateNameConflict"
INVALID_SPEC: Final = "InvalidSpec"


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


class EventRecorder:
    """Creates and aggregates Events for one controller instance."""

    def __init__(self, api: kubeapi.Api, *, instance: str, remember: int = 1024) -> None:
        self._api = api
        self._instance = instance
        self._remember = remember
        self._recent: collections.OrderedDict[tuple[str, str, str, str], tuple[str, int]] = (
            collections.OrderedDict()
        )

    async def emit(self, target: Target, kind: str, reason: str, message: str) -> None:
        """Record one occurrence; never raises (except on cancellation)."""
        key = (target.uid, kind, reason, message)
        seen = self._recent.get(key)
        try:
            if seen is not None:
                name, count = seen
                body = {"count": count + 1, "lastTimestamp": kubeapi.now().isoformat()}
                await self._api.patch(Event, name, body, namespace=target.namespace)
                self._recent[key] = (name, count + 1)
                self._recent.move_to_end(key)
                return
            name = f"{target.name}.{uuid.uuid4().hex[:16]}"
            now = kubeapi.now()
            await self._api.create(
                Event(
                    metadata=ObjectMeta(name=name, namespace=target.namespace),
                    involvedObject=target.reference(),
                    type=kind,
                    reason=reason,
                    message=message,
                    count=1,
                    firstTimestamp=now,
                    lastTimestamp=now,
                    source=EventSource(component=COMPONENT),
                    reportingComponent=COMPONENT,
                    reportingInstance=self._instance,
                )
            )
        except kubeapi.NotFound as err:
            if seen is None:  # the namespace is gone: nobody will read the Event
                logger.debug("no event %s: %s", reason, err, extra=_cd(target))
                return
            self._recent.pop(key, None)  # the aggregated Event expired; start a new one
            await self.emit(target, kind, reason, message)
            return
        except errors.ComputeDomainsError as err:
            # Events inform people; losing one must not fail or delay the reconcile.
            logger.warning("could not record event %s: %s", reason, err, extra=_cd(target))
            return
        self._recent[key] = (name, 1)
        while len(self._recent) > self._remember:
            self._recent.popitem(last=False)


def _cd(target: Target) -> dict[str, str]:
    return {"cd": f"{target.namespace}/{target.name}"}
