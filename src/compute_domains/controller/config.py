"""The controller's settings: frozen dataclasses, built by the CLI, passed down explicitly.

Every field has a production default (upstream's where one exists) and says why. Sub-concerns
are nested: ``DaemonSettings`` is what the per-CD DaemonSet is rendered from,
``LeaderElectionSettings`` drives the Lease, ``kube`` says how to reach the API server.
``__post_init__`` rejects combinations that cannot work, as a ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import re

from compute_domains.api import names, sharedimex
from compute_domains.infra import backoff, errors, kube

_QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?")
"""A Kubernetes resource quantity in the forms a chart value takes (``500m``, ``1``, ``256Mi``)."""


IMEX_AGENTS_PER_CD = "perComputeDomain"
"""One DaemonSet per ComputeDomain runs its IMEX daemons (NVIDIA's model; the default)."""
IMEX_AGENTS_RESIDENT = "resident"
"""The chart's resident agent on every GPU node runs the IMEX daemon of the CD its node serves."""
IMEX_AGENTS_MODES = (IMEX_AGENTS_PER_CD, IMEX_AGENTS_RESIDENT)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DaemonSettings:
    """What the per-CD daemon pods are rendered with (the DaemonSet is never updated later)."""

    image: str
    """Image of the daemon container: the project image, ``<repository>:<tag>``."""
    max_nodes_per_imex_domain: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    """Daemon slots per clique (upstream default 18); rendered as ``MAX_NODES_PER_IMEX_DOMAIN``
    and used by the controller to detect a full clique."""
    log_level: str = "info"
    """Log level of the daemons (``LOG_VERBOSITY`` and ``CD_LOG_LEVEL`` in their env)."""
    log_format: str = "text"
    """Log format of the daemons (``CD_LOG_FORMAT``): ``text`` or ``json``."""
    image_pull_secrets: tuple[str, ...] = ()
    """Names of Secrets in the driver namespace used to pull the daemon image; none by default."""
    metrics_port: int = 8082
    """Port of the daemons' ``/metrics`` on their pod IP (``METRICS_PORT``, a container port
    named ``metrics``, Prometheus scrape annotations); 0 renders none."""
    priority_class_name: str = ""
    """PriorityClass of the daemon pods (the chart creates a non-preempting one by default, so
    daemons are scheduled ahead of other pending pods); empty: none."""
    cpu: str = ""
    """CPU of the daemon container as a Kubernetes quantity, rendered as both request and limit;
    empty: none. With ``memory`` set too the daemon pods get Guaranteed QoS."""
    memory: str = ""
    """Memory of the daemon container (request = limit), a Kubernetes quantity; empty: none."""

    def __post_init__(self) -> None:
        for what, value in (("cpu", self.cpu), ("memory", self.memory)):
            if value and not _QUANTITY.fullmatch(value):
                raise errors.ConfigError(f"daemon {what} is not a Kubernetes quantity: {value!r}")
        if not self.image:
            raise errors.ConfigError("the daemon image must be set (IMAGE_NAME)")
        if not 0 <= self.metrics_port <= 65535:
            raise errors.ConfigError(f"daemon metrics port out of range: {self.metrics_port}")
        if self.max_nodes_per_imex_domain < 1:
            raise errors.ConfigError(
                f"max nodes per IMEX domain must be >= 1, got {self.max_nodes_per_imex_domain}"
            )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LeaderElectionSettings:
    """Lease-based leader election among controller replicas.

    With the defaults a standby takes over at most ``lease_duration_s + retry_period_s`` (17 s)
    after the leader stopped renewing, and at once when the leader stepped down gracefully.
    """

    enabled: bool = False
    """Off for a single replica; the Helm chart turns it on (two replicas)."""
    lease_name: str = "compute-domains-controller"
    """Name of the ``coordination.k8s.io/v1`` Lease."""
    lease_namespace: str = ""
    """Namespace of the Lease; empty means the driver namespace."""
    identity: str = ""
    """This replica's name (the pod name); a random suffix is appended per process."""
    lease_duration_s: float = 15.0
    """How long a standby waits, after it last saw the record change, before taking over."""
    renew_deadline_s: float = 10.0
    """How long the leader keeps trying to renew before it gives up leading."""
    retry_period_s: float = 2.0
    """Interval of acquire attempts (standby) and renewals (leader)."""
    release_on_cancel: bool = True
    """Clear the holder on a graceful stop, so a standby takes over at once."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise errors.ConfigError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got "
                f"{self.retry_period_s} / {self.renew_deadline_s} / {self.lease_duration_s}"
            )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ControllerSettings:
    """Everything one controller instance needs; nothing else is read from anywhere."""

    namespace: str
    """Driver namespace: daemon DaemonSets and ResourceClaimTemplates, cliques, daemon pods."""
    daemon: DaemonSettings
    """How the per-CD daemons are rendered."""
    kube: kube.KubeSettings = dataclasses.field(default_factory=kube.KubeSettings)
    """How to reach the API server (in-cluster by default)."""
    leader_election: LeaderElectionSettings = dataclasses.field(
        default_factory=LeaderElectionSettings
    )
    """Lease-based leader election (off by default)."""
    metrics_address: str = ""
    """Address the metrics/health HTTP server binds; empty means every interface."""
    metrics_port: int = 8080
    """Port of ``/metrics``, ``/healthz`` and ``/readyz``; 0 disables the server."""
    workers: int = 4
    """Reconciles running at once; one CD is never reconciled by two workers at once."""
    status_coalesce_s: float = 0.05
    """Delay before a pod/clique/node change is acted on, so a burst becomes one status write
    per CD; small against the 1 s target for a daemon's readiness to show in the status."""
    status_progress_interval_s: float = 1.0
    """Least time between two status writes of one CD that carry only progress (an entry
    appeared, got its index or turned Ready; ``statuschange.urgent``); a verdict change (the CD
    turns Ready, a reason changes, a Ready member is lost) is written at once, so it never adds
    to the time from the last daemon's Ready to the CD's."""
    index_coalesce_s: float = 0.02
    """Delay before a daemon pod or clique change is looked at by the index assigner, so daemons
    that label their pods together get their indices in one clique write; it is on each
    daemon's critical path (a daemon waits for its index before it starts IMEX)."""
    retry: backoff.Backoff = dataclasses.field(
        default_factory=lambda: backoff.Backoff(initial=0.05, maximum=300.0, jitter=0.1)
    )
    """Per-CD backoff after a failed reconcile (50 ms doubling, capped at 5 min)."""
    sweep_interval_s: float = 300.0
    """Period of the orphan sweep (one pass also runs as soon as the caches are filled)."""
    watch_timeout_s: int = 300
    """Server-side timeout of each watch request; the watch then resumes where it was."""
    imex_agents: str = IMEX_AGENTS_PER_CD
    """Who runs a CD's IMEX daemons (chart value ``imex.agents``, env ``IMEX_AGENTS``):
    ``perComputeDomain`` (the controller creates one DaemonSet and daemon ResourceClaimTemplate
    per CD, NVIDIA's model) or ``resident`` (the chart's resident agents serve a CD on every
    node labelled for it; the controller creates neither; docs/isolation.md)."""
    default_imex_scope: sharedimex.Scope = sharedimex.Scope.PER_DOMAIN
    """Isolation scope written onto a new CD without the ``compute-domains/imex-scope``
    annotation (chart value ``imex.scope``, env ``IMEX_SCOPE``): ``perDomain`` (an IMEX domain
    per CD, NVIDIA's isolation) or ``perClique`` (one shared IMEX domain per clique, a channel
    per CD; needs ``imex_agents`` resident). A CD keeps the scope it was created with
    (``scope``), so changing this applies to new CDs only."""

    def __post_init__(self) -> None:
        if not self.namespace:
            raise errors.ConfigError("the driver namespace must be set (POD_NAMESPACE)")
        if self.workers < 1:
            raise errors.ConfigError(f"workers must be >= 1, got {self.workers}")
        if not 0 <= self.metrics_port <= 65535:
            raise errors.ConfigError(f"metrics port out of range: {self.metrics_port}")
        if self.sweep_interval_s <= 0 or self.status_coalesce_s < 0 or self.index_coalesce_s < 0:
            raise errors.ConfigError("sweep interval must be > 0 and coalesce delays >= 0")
        if self.status_progress_interval_s < 0:
            raise errors.ConfigError("the status progress interval must be >= 0")
        if self.imex_agents not in IMEX_AGENTS_MODES:
            raise errors.ConfigError(
                f"imex agents must be one of {', '.join(IMEX_AGENTS_MODES)}, got "
                f"{self.imex_agents!r}"
            )
        if self.default_imex_scope is sharedimex.Scope.PER_CLIQUE and self.per_cd_daemons:
            raise errors.ConfigError(
                "the perClique IMEX scope needs the resident IMEX agents (imex agents "
                f"{IMEX_AGENTS_RESIDENT!r}): the shared IMEX of a clique is theirs; got imex "
                f"agents {self.imex_agents!r}"
            )

    @property
    def per_cd_daemons(self) -> bool:
        """Whether the controller creates each CD's DaemonSet and daemon template."""
        return self.imex_agents == IMEX_AGENTS_PER_CD

    @property
    def lease_namespace(self) -> str:
        """Namespace of the leader-election Lease."""
        return self.leader_election.lease_namespace or self.namespace
