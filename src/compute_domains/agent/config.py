"""AgentSettings: who the resident agent is (node, pod) and how it serves its node's CD.

Built by the CLI (``cli/agent``) from flags and the environment of the chart's agent DaemonSet;
nothing here reads the environment. The per-CD daemon's own settings are not in here: the CLI
passes a function that builds them for one CD (``DaemonFactory``), the same builder ``cdctl daemon
run`` uses, so a CD served by the agent runs the daemon exactly as its own pod would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from compute_domains.api import sharedimex
from compute_domains.daemon.config import DaemonSettings
from compute_domains.infra import backoff, errors, kube


@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    """The CD a node serves, as its Node says: the CD label and the node's clique ID."""

    domain_uid: str
    """UID of the ComputeDomain (the node's ``resource.nvidia.com/computeDomain`` label)."""
    clique_id: str
    """The node's ``nvidia.com/gpu.clique`` label; empty without multi-node NVLink."""


SHARED_FOLDER = "shared-imex"
"""The clique's shared IMEX: its folder under ``domains_dir`` (its IMEX files, which the
per-clique CDs' workloads read), and the ``domain_uid`` of the pseudo-domain whose daemon
settings it runs with (no CD has that UID: a CD's UID is a UUID)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Shared:
    """The clique's shared IMEX, as a node asks for it: label ``compute-domains/shared-imex=on``
    and its clique ID."""

    clique_id: str
    """The node's ``nvidia.com/gpu.clique`` label (never empty: no clique, no shared IMEX)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Wants:
    """What a Node asks of its agent (``labels.wants_of``)."""

    domain: Assignment | None = None
    """A per-domain CD (its ``resource.nvidia.com/computeDomain`` label)."""
    shared: Shared | None = None
    """The clique's shared IMEX."""
    shared_without_clique: bool = False
    """The shared-IMEX label is set but the node has no clique ID (nothing to run)."""
    clique_id: str = ""
    """The node's ``nvidia.com/gpu.clique`` label, whatever it asks ("" without one)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Domain:
    """One CD the agent serves, with what the daemon's settings need of it (for the shared
    IMEX: the pseudo-domain :data:`SHARED_FOLDER`)."""

    assignment: Assignment
    name: str
    """The CD's name ("" when it could not be read: only log lines use it)."""
    namespace: str
    """The CD's namespace ("" when unknown)."""
    domain_dir: Path
    """Where the CD's per-CD folder is, as the agent's container sees it."""


def shared_domain(settings: AgentSettings, wanted: Shared) -> Domain:
    """The pseudo-domain the clique's shared IMEX runs as: UID and folder
    :data:`SHARED_FOLDER`, named after its registry (log lines), in the driver namespace."""
    return Domain(
        assignment=Assignment(domain_uid=SHARED_FOLDER, clique_id=wanted.clique_id),
        name=sharedimex.registry_name(wanted.clique_id),
        namespace=settings.pod_namespace,
        domain_dir=settings.domains_dir / SHARED_FOLDER,
    )


DaemonFactory = Callable[[Domain], DaemonSettings]
"""Builds (and validates) the daemon settings for one CD; raises ``ConfigError``."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AgentSettings:
    """Everything ``ResidentAgent.run()`` needs besides the daemon factory."""

    node_name: str
    """The node the agent runs on (``NODE_NAME``); its Node is watched."""
    pod_name: str
    """The agent's pod (``POD_NAME``): labelled with the CD it serves."""
    pod_namespace: str
    """The agent's namespace (``POD_NAMESPACE``), the driver namespace."""
    pod_ip: str = ""
    """The agent's pod IP (``POD_IP``): where its probes and metrics are served."""
    domains_dir: Path = Path("/domains")
    """The kubelet plugin's per-CD folders (``<plugin dir>/domains``) as mounted in the agent:
    the daemon of CD ``X`` writes its IMEX files in ``<domains_dir>/X``, where the CD's
    workloads see them at ``/imexd``."""
    metrics_port: int = 0
    """Port of ``/metrics`` and the probe path on the pod IP; 0 serves none."""
    shared_imex_eager: bool = False
    """The kubelet plugins label every node that has a clique ID for its clique's shared IMEX
    at their start (``SHARED_IMEX_EAGER``, the chart's ``imex.scope=perClique``): on such a
    node the shared IMEX is what the Node asks while no per-domain CD holds it, so an idle
    agent there is not Ready until that label came and its IMEX passes its check (issue 28:
    Ready before the label, NotReady for the IMEX start, Ready again was a flap of every
    agent whose probe passed before its plugin's label)."""
    stop_timeout: float = 20.0
    """Seconds a served CD's daemon may take to stop (IMEX stopped, clique entry removed)."""
    retry: backoff.Backoff = dataclasses.field(
        default_factory=lambda: backoff.Backoff(initial=0.05, maximum=6.0)
    )
    """Retry policy of the agent's own API calls (watch, pod label patch)."""
    kube: kube.KubeSettings = dataclasses.field(
        default_factory=lambda: kube.KubeSettings(field_manager="compute-domain-agent")
    )
    """API access: the pod's ServiceAccount unless a kubeconfig is given."""

    def __post_init__(self) -> None:
        missing = [
            flag
            for flag, value in (
                ("--node-name/NODE_NAME", self.node_name),
                ("--pod-name/POD_NAME", self.pod_name),
                ("--pod-namespace/POD_NAMESPACE", self.pod_namespace),
            )
            if not value
        ]
        if missing:
            raise errors.ConfigError(f"missing agent identity: {', '.join(missing)}")
        if not 0 <= self.metrics_port <= 65535:
            raise errors.ConfigError(f"METRICS_PORT out of range: {self.metrics_port}")
        if self.stop_timeout <= 0:
            raise errors.ConfigError(f"stop timeout must be > 0, got {self.stop_timeout}")
