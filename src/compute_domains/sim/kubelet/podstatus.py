"""Pod status as a kubelet reports it, computed from the simulated containers' states.

Pure functions: container state records in, the wire-format ``status`` (phase, conditions,
container statuses, IPs) out, as the body of a strategic merge patch. The pod worker owns the
records; its status manager (``statusmanager``) publishes what this builds.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Literal

State = Literal["waiting", "running", "terminated"]


def now() -> str:
    """RFC 3339 timestamp as the API expects it."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def after_reboot(rec: ContainerRecord, previous: Any) -> None:
    """Carry a container's history over from the node's previous boot.

    ``previous`` is the ``ContainerStatus`` the pod's status still shows from before (or None).
    A container that had been created then died with the node: like a kubelet finding its
    exited container in the runtime after a reboot, the restart counts it and its last state
    shows the unexplained end (exit 255, reason Unknown), and the new container gets a new id.
    """
    if previous is None or not previous.containerID:
        return
    rec.restart_count = (previous.restartCount or 0) + 1
    started = ""
    if previous.state is not None and previous.state.running is not None:
        started = previous.state.running.startedAt or ""
    rec.last_terminated = {
        "exitCode": 255,
        "reason": "Unknown",
        "startedAt": started or None,
        "finishedAt": now(),
        "containerID": previous.containerID,
    }


@dataclasses.dataclass(slots=True)
class ContainerRecord:
    """What the worker knows about one container (mutable, owned by the pod worker)."""

    name: str
    image: str
    init: bool = False
    state: State = "waiting"
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: str = ""
    finished_at: str = ""
    exit_code: int = 0
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    container_id: str = ""
    last_terminated: dict[str, Any] | None = None
    will_restart: bool = True

    def wire(self) -> dict[str, Any]:
        """The ``ContainerStatus`` object."""
        state: dict[str, Any]
        if self.state == "running":
            state = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = {
                "terminated": {
                    "exitCode": self.exit_code,
                    "reason": self.reason,
                    "message": self.message or None,
                    "startedAt": self.started_at or None,
                    "finishedAt": self.finished_at,
                    "containerID": self.container_id or None,
                }
            }
        else:
            state = {"waiting": {"reason": self.reason, "message": self.message or None}}
        out: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": f"sim://{self.image}",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": {},
        }
        if self.container_id:
            out["containerID"] = self.container_id
        if self.last_terminated is not None:
            out["lastState"] = {"terminated": self.last_terminated}
        return out

    def terminate(self, exit_code: int, reason: str | None = None, message: str = "") -> None:
        """Record that the process ended."""
        self.state = "terminated"
        self.exit_code = exit_code
        self.reason = reason or ("Completed" if exit_code == 0 else "Error")
        self.message = message
        self.finished_at = now()
        self.ready = False
        self.started = False

    def wait(self, reason: str, message: str = "") -> None:
        """Record a waiting state (before a start or a restart)."""
        if self.state == "terminated":
            self.last_terminated = {
                "exitCode": self.exit_code,
                "reason": self.reason,
                "startedAt": self.started_at or None,
                "finishedAt": self.finished_at,
                "containerID": self.container_id or None,
            }
        self.state = "waiting"
        self.reason = reason
        self.message = message
        self.ready = False


def phase(records: list[ContainerRecord], sandbox_ready: bool) -> str:
    """Pod phase from its containers (restartPolicy already folded into ``will_restart``)."""
    inits = [r for r in records if r.init]
    mains = [r for r in records if not r.init]
    if not sandbox_ready or any(not (r.state == "terminated" and r.exit_code == 0) for r in inits):
        if any(r.state == "terminated" and r.exit_code != 0 and not r.will_restart for r in inits):
            return "Failed"
        return "Pending"
    if mains and all(r.state == "terminated" and not r.will_restart for r in mains):
        return "Succeeded" if all(r.exit_code == 0 for r in mains) else "Failed"
    if any(r.state == "running" or r.restart_count > 0 or r.state == "terminated" for r in mains):
        return "Running"
    return "Pending"


def transition(since: dict[str, str], kind: str, status: str) -> str:
    """The ``lastTransitionTime`` of condition ``kind`` now at ``status``: the moment it last
    changed status, as the kubelet keeps it (``since`` holds ``kind`` → ``status@stamp`` and is
    updated on a change). A condition rewritten unchanged keeps its stamp, so a status write
    that changes nothing else is the same status: no new object version and no watch event
    for every watcher of the pod."""
    held = since.get(kind, "")
    before, _, stamp = held.partition("@")
    if before != status or not stamp:
        stamp = now()
        since[kind] = f"{status}@{stamp}"
    return stamp


def _cond(
    kind: str,
    ok: bool,
    reason: str = "",
    since: dict[str, str] | None = None,
) -> dict[str, Any]:
    status = "True" if ok else "False"
    stamp = transition(since if since is not None else {}, kind, status)
    out: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastTransitionTime": stamp,
        "lastProbeTime": None,
    }
    if reason and not ok:
        out["reason"] = reason
    elif reason:
        out["reason"] = None  # a merge patch: clear the reason a NotReady spell left behind
    return out


def build(
    records: list[ContainerRecord],
    *,
    sandbox_ready: bool,
    pod_ip: str,
    host_ip: str,
    start_time: str,
    since: dict[str, str],
    message: str = "",
) -> dict[str, Any]:
    """The pod's ``status`` object (PodScheduled is the scheduler's and left out)."""
    mains = [r for r in records if not r.init]
    inits = [r for r in records if r.init]
    initialized = all(r.state == "terminated" and r.exit_code == 0 for r in inits)
    ready = sandbox_ready and bool(mains) and all(r.ready for r in mains)
    status: dict[str, Any] = {
        "phase": phase(records, sandbox_ready),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": start_time,
        "conditions": [
            _cond("PodReadyToStartContainers", sandbox_ready, since=since),
            _cond("Initialized", initialized, "ContainersNotInitialized", since),
            _cond("ContainersReady", ready, "ContainersNotReady", since),
            _cond("Ready", ready, "ContainersNotReady", since),
        ],
        "containerStatuses": [r.wire() for r in mains],
    }
    if inits:
        status["initContainerStatuses"] = [r.wire() for r in inits]
    if sandbox_ready and pod_ip:
        status["podIP"] = pod_ip
        # podIPs merges by "ip" in a strategic merge patch: a new address (a pod's sandbox
        # re-created after a reboot) would be added next to the old one, and the API server
        # refuses two IPv4 addresses, so every later status write of the pod failed. Replace
        # the list, as the kubelet's two-way patch does.
        status["podIPs"] = [{"ip": pod_ip}, {"$patch": "replace"}]
    if message:
        status["message"] = message
    return status
