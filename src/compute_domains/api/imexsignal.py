"""The per-node IMEX readiness signal: an annotation on the resident agent's pod that serves a
per-domain CD on a node, from which the controller writes that node's clique entry status.

A per-domain CD's clique object ``<cdUID>.<cliqueID>`` holds up to 18 entries. When each daemon
patched its own entry's ``status``, 18 writers hit one object at about the same moment and the
API server retried each conflicting patch internally (one write up to 8.6 s at N = 36 on two
cores, docs/benchmarks.md). A resident agent's daemon now writes only this signal, on its own
pod, where no other process writes; the controller's index assigner, already the only writer of
the entries' other fields, writes the status of every signalling node of a clique in one patch
(``controller.cliqueindex``, docs/decisions/0025). The entry stays what everything reads: the
plugin's prepare, the CD's status, NVIDIA's tests.

* **Where:** annotation ``compute-domains/imex-ready.<cdUID>`` (:func:`key`) on the agent's pod.
  Only that pod's daemon writes it (``daemon.podsignal``): set when its own IMEX check passes,
  removed when it fails or the daemon stops; the agent's label write for a CD removes a value an
  earlier daemon of the same process left (``agent.labels``).
* **What:** JSON ``{"at": <write time, RFC 3339 with microseconds>, "imex": <instance>}``
  (:func:`encode`): ``imex`` names the IMEX instance (a new value at every turn to Ready).
* **When it counts** (:func:`judge`): the pod is bound to the node, in the driver namespace,
  not terminating, labelled ``resource.nvidia.com/computeDomain=<cdUID>`` (an agent unlabels
  its pod before it stops serving a CD), every container is running, and the signal was
  written at least one second after the second its containers' current run started
  (``state.running.startedAt``, which the API keeps to the second). A value left by a killed
  process (``kill -9``; its IMEX, its child, died with it) was written before the restarted
  container started, so it never counts, and the controller turns the entry NotReady as soon
  as the kubelet reports the container's new run; the writer waits, if it must, until one
  second past the second its own process began (:func:`not_before`), so its own value always
  counts. Both times come from the node's one clock (the kubelet's and the writer's); the
  controller's clock plays no part.

Only a pod that declares it (:data:`DECLARED`, in the agent DaemonSet's pod template) has its
entry's status written by the controller: a per-CD daemon pod (NVIDIA's model, ours or
NVIDIA's own, adopted: docs/decisions/0021) or an agent pod of an older version writes its own
entry's status as before, and the controller leaves that status alone.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from collections.abc import Mapping
from typing import Any, Final

from compute_domains.api import names

PREFIX: Final = "compute-domains/imex-ready."
"""The annotation's key without the CD's UID."""
DECLARED: Final = {"compute-domains/imex-ready-signal": "v1"}
"""On the pod template of the chart's agent DaemonSet: its daemons write the signal instead of
their entry's status, and the controller writes that status from it. A pod without it (a per-CD
daemon pod, NVIDIA's, an agent of an older version) writes its entry's status itself."""
NVIDIA_DAEMON_PROGRAM: Final = "compute-domain-daemon"
"""What the daemon container of NVIDIA's DaemonSet runs (``command[0]``)."""


def key(domain_uid: str) -> str:
    """The signal's annotation key for CD ``domain_uid``."""
    return f"{PREFIX}{domain_uid}"


@dataclasses.dataclass(frozen=True, slots=True)
class Signal:
    """One decoded signal."""

    at: datetime.datetime
    """When it was written (aware, UTC)."""
    imex: str
    """The IMEX instance it names."""


def encode(at: datetime.datetime, imex: str) -> str:
    """The annotation's value for an IMEX instance that passed its check, written at ``at``."""
    stamp = at.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return json.dumps({"at": stamp, "imex": imex}, sort_keys=True)


def decode(text: str | None) -> Signal | None:
    """The signal in ``text``, or None when absent or not one of ours."""
    if not text:
        return None
    try:
        raw = json.loads(text)
        at = datetime.datetime.fromisoformat(str(raw["at"]).replace("Z", "+00:00"))
        imex = str(raw["imex"])
    except (ValueError, KeyError, TypeError):
        return None
    if at.tzinfo is None:
        return None
    return Signal(at=at, imex=imex)


def not_before(started: float) -> float:
    """The earliest time (epoch seconds) a process that began at ``started`` may stamp a signal:
    one second past the second it began, so it is never older than its container's start as the
    API shows it (to the second) plus one second."""
    return math.floor(started) + 1.0


def runs_nvidias_daemon(pod_spec: Any) -> bool:
    """Whether a pod (template) spec runs NVIDIA's daemon, which writes no signal."""
    containers = getattr(pod_spec, "containers", None) or []
    return any((c.command or [""])[0] == NVIDIA_DAEMON_PROGRAM for c in containers)


def declares(annotations: Mapping[str, str] | None) -> bool:
    """Whether a pod with these annotations declares that its daemons write the signal."""
    found = annotations or {}
    return all(found.get(k) == v for k, v in DECLARED.items())


def serves(pod: Any, *, domain_uid: str, node: str, namespace: str) -> bool:
    """Whether ``pod`` (a lightkube Pod) serves CD ``domain_uid`` on ``node`` (in the driver
    namespace ``namespace``), live or not, and declares that it writes the signal."""
    meta, spec = pod.metadata, pod.spec
    annotations = (meta.annotations if meta is not None else None) or {}
    return (
        meta is not None
        and spec is not None
        and meta.namespace == namespace
        and spec.nodeName == node
        and (meta.labels or {}).get(names.COMPUTE_DOMAIN_LABEL) == domain_uid
        and declares(annotations)
        and not runs_nvidias_daemon(spec)
    )


def judge(pod: Any, *, domain_uid: str, node: str, namespace: str) -> str:
    """ "" when ``pod``'s signal says the node's IMEX of ``domain_uid`` runs now, else why not
    (in words, for the controller's log line)."""
    meta = pod.metadata
    name = (meta.name if meta is not None else "") or "?"
    if not serves(pod, domain_uid=domain_uid, node=node, namespace=namespace):
        return f"pod {name} does not serve the CD on node {node} with a readiness signal"
    if meta.deletionTimestamp is not None:
        return f"pod {name} is terminating"
    signal = decode((meta.annotations or {}).get(key(domain_uid)))
    if signal is None:
        return f"pod {name} has not signalled its IMEX Ready (annotation {key(domain_uid)})"
    statuses = (pod.status.containerStatuses or []) if pod.status is not None else []
    starts = [_running_since(c) for c in statuses]
    if not starts or any(s is None for s in starts):
        return f"pod {name} has a container that is not running"
    started = max(s for s in starts if s is not None)
    if signal.at < started + datetime.timedelta(seconds=1):
        return (
            f"pod {name}'s signal (IMEX {signal.imex}, {signal.at:%H:%M:%S.%f}) is older than its "
            f"container's current run (since {started:%H:%M:%S}): left by a previous process"
        )
    return ""


def _running_since(status: Any) -> datetime.datetime | None:
    running = status.state.running if status.state is not None else None
    started = running.startedAt if running is not None else None
    if started is None:
        return None
    if isinstance(started, str):
        started = datetime.datetime.fromisoformat(started.replace("Z", "+00:00"))
    if not isinstance(started, datetime.datetime):
        return None
    return started if started.tzinfo is not None else started.replace(tzinfo=datetime.UTC)
