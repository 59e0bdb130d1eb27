"""The per-node IMEX readiness signal: an annotation on the pod that serves a CD on a node.

A kubelet plugin's prepare of a per-domain CD's claim returns only once the node's IMEX for
that CD runs. It used to wait for the node's entry in the CD's clique object, which every
daemon of the clique patches at about the same moment (18 writers on one object at N = 36:
3.8 s median, 9.4 s max for one patch). The entry is still written (the controller's status and
NVIDIA's tests read it), but the prepare waits for this signal instead (docs/decisions/0023):

* **Where:** annotation ``compute-domains/imex-ready.<cdUID>`` (:func:`key`) on the pod that
  serves the CD on the node: the resident agent's pod, or in the per-CD DaemonSet mode the
  daemon's own pod. Only that pod's process writes it (``daemon.podsignal``): set when its own
  IMEX check passes, removed when it fails or the daemon stops. One writer per object: no
  patch ever contends with another daemon's.
* **What:** JSON ``{"at": <write time, RFC 3339 with microseconds>, "imex": <instance>}``
  (:func:`encode`): ``imex`` names the IMEX instance (a new value at every turn to Ready).
* **When it counts** (:func:`judge`): the pod is bound to the node, in the driver namespace,
  not terminating, labelled ``resource.nvidia.com/computeDomain=<cdUID>`` (an agent unlabels
  its pod before it stops serving a CD), every container is running, and the signal was
  written at least one second after the second its containers' current run started
  (``state.running.startedAt``, which the API keeps to the second). A value left by a killed
  process (``kill -9``; its IMEX, its child, died with it) was written before the restarted
  container started, so it never counts; the writer waits, if it must, until one second past
  the second its own process began (:func:`not_before`), so its own value always counts.
  Both times come from the node's one clock (the kubelet's and the writer's).

Only a pod that declares it writes the signal (:data:`DECLARED`, in its pod template) counts
as serving here: a daemon pod of an older version (its DaemonSet is never updated) or of
NVIDIA's (a domain NVIDIA formed, adopted by our DaemonSet, docs/decisions/0021) writes none,
and there the clique entry is still what the prepare waits for (``plugin.imexready``).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from typing import Any, Final

from compute_domains.api import names

PREFIX: Final = "compute-domains/imex-ready."
"""The annotation's key without the CD's UID."""
DECLARED: Final = {"compute-domains/imex-ready-signal": "v1"}
"""On the pod template of every pod whose daemon writes the signal (the chart's agent DaemonSet,
the controller's per-CD DaemonSets): a pod without it (a daemon of an older version, whose
DaemonSet the controller never updates, or NVIDIA's) never signals, and its clique entry is what
a prepare waits for."""
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
        and all(annotations.get(k) == v for k, v in DECLARED.items())
        and not runs_nvidias_daemon(spec)
    )


def judge(pod: Any, *, domain_uid: str, node: str, namespace: str) -> str:
    """ "" when ``pod``'s signal says the node's IMEX of ``domain_uid`` runs now, else why not
    (in words, for a prepare's timeout)."""
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
