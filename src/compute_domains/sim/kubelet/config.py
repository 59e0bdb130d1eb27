"""Settings of the simulated kubelet: one node's identity, folders and timings.

Frozen dataclasses, built by the node agent (``sim.agent``) from the sim's settings; the
defaults are the simulator's, shorter than a real kubelet's where that only makes tests wait.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from compute_domains.sim import topology


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class KubeletSettings:
    """Timings and behaviour of the simulated kubelet."""

    restart_backoff_s: float = 2.0
    """First container restart back-off (the real kubelet uses 10 s, doubling to 5 min)."""
    restart_backoff_cap_s: float = 40.0
    """Cap of the container restart back-off."""
    retry_backoff_s: float = 1.0
    """First retry delay for DRA preparation and the pod sandbox."""
    volume_retry_s: float = 0.5
    """First retry delay for a volume (the real kubelet's volume operations back off from
    500 ms, doubling: ``initialDurationBeforeRetry`` of its nestedpendingoperations). The usual
    failure is a ServiceAccount token refused because the Node authorizer has not seen the
    pod's binding yet; it clears within milliseconds."""
    retry_backoff_cap_s: float = 10.0
    """Cap of that retry delay."""
    lease_renew_s: float = 2.0
    """Lease renewal interval; must stay well under the controller-manager's grace period (a
    quarter of it, as the kubelet renews at a quarter of its 40 s Lease)."""
    status_update_s: float = 10.0
    """How often the Ready condition's heartbeat is refreshed."""
    relist_s: float = 0.1
    """How long after its start a container is reported running. The real kubelet learns of a
    start at its next PLEG relist (every 1 s), so what a container prints at once is in its log
    before its pod turns Ready; NVIDIA's tests rely on that."""


UPSTREAM_HEARTBEATS = {"lease_renew_s": 10.0, "status_update_s": 60.0}
"""With upstream's 40 s grace period (``cluster.SimSettings.patience``): the kubelet's 10 s Lease
renewal; the Node status heartbeat, which the node-lifecycle controller does not need while
the Lease is renewed, once a minute (the kubelet: when it changed, else every 5 min)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class NodeSettings:
    """One node's identity, folders and timings."""

    spec: topology.NodeSpec
    root: Path
    """The node's "host" filesystem (kubelet dirs, CDI dirs, /proc/devices stand-in)."""
    api_host: str
    api_port: int
    kubelet_port: int = 10250
    """Port of the node's kubelet endpoint (logs) on its own address."""
    kubelet: KubeletSettings = dataclasses.field(default_factory=KubeletSettings)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DraSettings:
    """Where the node's kubelet folders are and how long calls may take."""

    node: str
    root: Path
    call_timeout_s: float = 45.0
    """Deadline of one NodePrepare/NodeUnprepare call (the kubelet's 45 s)."""
    reconcile_s: float = 10.0
    """Period of the unprepare reconcile for vanished pods (the kubelet uses 60 s)."""
