"""DaemonSettings: who this daemon is (CD, clique, node, pod), where its files live, its timings.

The CLI builds these from flags and the environment the DaemonSet and the kubelet plugin's CDI
edits provide; nothing below ``cli/`` reads the environment. Every component receives the
narrowest piece it needs: the membership protocol gets :class:`Identity` and the retry policy,
the IMEX files writer gets ``imex``, the supervisor gets ``supervisor``.

``validate()`` turns the upstream start-up failures into one clear ``ConfigError``: no
``COMPUTE_DOMAIN_UUID`` means the CDI edits of the daemon claim were not applied.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import signal
from pathlib import Path

from compute_domains.api import names
from compute_domains.daemon import imexconfig, supervisor
from compute_domains.infra import backoff, errors, kube

CDI_HINT = "CDI container edits did not apply -- is CDI enabled in your container runtime?"
"""Why ``COMPUTE_DOMAIN_UUID`` is missing, in upstream's words (operators search for them)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Identity:
    """Who this daemon is: its pod (downward API) and its CD and clique (CDI env)."""

    node_name: str
    """Node the pod runs on (``NODE_NAME``); the key of our clique entry."""
    pod_name: str
    """Our pod's name (``POD_NAME``): labelled, watched for readiness, made a clique owner."""
    pod_namespace: str
    """Our pod's namespace (``POD_NAMESPACE``), the driver namespace; the clique lives here."""
    pod_uid: str
    """Our pod's UID (``POD_UID``), for the clique's owner reference and Events."""
    pod_ip: str = ""
    """Our pod's IP (``POD_IP``): IMEX command bind address and our clique entry's address."""
    clique_id: str = ""
    """``<clusterUUID>.<cliqueNumber>`` of the node (``CLIQUE_ID``); empty without MNNVL."""
    domain_uid: str = ""
    """UID of the ComputeDomain (``COMPUTE_DOMAIN_UUID``, CDI-injected)."""
    domain_name: str = ""
    """Name of the ComputeDomain (``COMPUTE_DOMAIN_NAME``, CDI-injected; for logs)."""
    domain_namespace: str = ""
    """Namespace of the ComputeDomain (``COMPUTE_DOMAIN_NAMESPACE``, CDI-injected; for logs)."""

    @property
    def has_clique(self) -> bool:
        """Whether the node is on an NVLink fabric (runs IMEX and registers in a clique)."""
        return bool(self.clique_id)

    @property
    def clique_name(self) -> str:
        """Name of our ComputeDomainClique object, ``<cdUID>.<cliqueID>``."""
        return names.clique_object_name(self.domain_uid, self.clique_id)

    @property
    def cd(self) -> str:
        """``namespace/name`` of the CD, for log lines."""
        return f"{self.domain_namespace}/{self.domain_name}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PeerSettings:
    """How peer-set changes reach IMEX (hosts file, SIGUSR1 pacing)."""

    hosts_file: Path = Path("/etc/hosts")
    """Hosts file IMEX resolves peer names with; only our marked block in it is rewritten."""
    reload_interval: float = 5.0
    """Seconds within which IMEX ignores a second SIGUSR1; later changes wait out the window."""
    reload_margin: float = 0.25
    """Extra seconds added to a wait for the window, so clock skew never makes IMEX drop one."""
    unfilled_address: str | None = names.IMEX_UNFILLED_SLOT_ADDRESS
    """Address for names of unfilled slots: upstream's sentinel 127.0.0.2 (upstream #1465), so
    IMEX's endless dialling of an unfilled slot never asks cluster DNS (search-domain
    floods); None leaves them unresolvable. Must not be any pod's address."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PeerLossSettings:
    """How the daemon tells its peers that its IMEX lost the links to them (``peerwatch``)."""

    bound: float = 2.0
    """Seconds a peer's link must stay lost before the peer is reported (a reconnect inside
    it, or a slow peer whose link IMEX keeps, reports nothing)."""
    recheck: float = 0.5
    """Seconds between IMEX queries while a lost link waits out the bound."""
    period: float = 5.0
    """Seconds between IMEX queries while reported peers stay lost (their return is also cued
    by IMEX's "Connection established" line)."""
    timeout: float = 6.0
    """Seconds before an ``nvidia-imex-ctl -N -j`` query counts as no answer (then nothing
    changes); above the time the ctl may spend asking an unreachable peer's command port."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HealthSettings:
    """The daemon's own IMEX check and the HTTP endpoint the kubelet's probes ask (``health``)."""

    fast_interval: float = 1.0
    """Seconds between own checks while IMEX is not READY (the startup probe's period); an
    IMEX output line brings the next one forward."""
    period: float = 5.0
    """Seconds between own checks while IMEX is READY (the readiness probe's period)."""
    settle: float = 0.1
    """Seconds of quiet on IMEX's output before a check it brought forward runs."""
    settle_max: float = 0.3
    """Seconds after the first line of a burst by which that check runs even if IMEX keeps
    printing: IMEX turns READY a few lines into its start-up burst and then logs one line per
    peer link (dialled, established), so waiting for quiet held the check back until the
    links settled (0.45 s median, 0.9 s max from READY to a passing check in an 18-node
    formation)."""
    timeout: float = 8.0
    """Seconds before a hanging ``nvidia-imex-ctl -q`` counts as not ready."""

    @property
    def stale_after(self) -> float:
        """Age (seconds) at which a READY result no longer passes the probe: a result is
        renewed every ``period`` and a check may take ``timeout``, plus a margin."""
        return self.period + self.timeout + 2.0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DaemonSettings:
    """Everything ``Daemon.run()`` needs; built by the CLI, validated before use."""

    identity: Identity
    """Who we are."""
    max_nodes: int = names.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    """Slots per clique (``MAX_NODES_PER_IMEX_DOMAIN``): indices and names ``0..max_nodes-1``."""
    imex_domain: str = ""
    """Identity of the IMEX domain our ``nvidia-imex`` belongs to, which gives its peer names
    their infix (``names.imex_dns_infix``; unique per domain, so a reused pod IP never carries
    one domain's messages into another, upstream #1447): "" is the CD's own domain (its UID);
    a clique's shared IMEX names ``shared-imex.<cliqueID>``."""
    nvidia_peer_names: bool = False
    """Use NVIDIA's peer names, ``compute-domain-daemon-%04d`` without an infix (``--imex-peer-
    names nvidia``): the daemon then joins the IMEX domain of NVIDIA's daemons, whose node map
    has those names, in a ComputeDomain NVIDIA formed and our controller took over
    (docs/decisions/0021). Such a domain keeps #1447's flaw (decision 0016) until it ends."""
    imex: imexconfig.ImexFilesSettings = dataclasses.field(
        default_factory=imexconfig.ImexFilesSettings
    )
    """IMEX config and nodes-config paths and ports."""
    imex_command: tuple[str, ...] = ("nvidia-imex",)
    """The IMEX daemon's argv prefix (found on PATH); ``-c <config>`` is appended."""
    imex_ctl_command: str = "nvidia-imex-ctl"
    """The IMEX control tool (found on PATH) of the daemon's own readiness check."""
    health: HealthSettings = dataclasses.field(default_factory=HealthSettings)
    """The own IMEX check's pace (its answer is ``/readyz`` on ``metrics_port``)."""
    supervisor: supervisor.SupervisorSettings = dataclasses.field(
        default_factory=lambda: supervisor.SupervisorSettings(
            name="imex", parent_death_signal=signal.SIGKILL
        )
    )
    """How the IMEX process is supervised (grace period, restart backoff)."""
    peers: PeerSettings = dataclasses.field(default_factory=PeerSettings)
    """Hosts-file and reload settings."""
    peer_loss: PeerLossSettings = dataclasses.field(default_factory=PeerLossSettings)
    """When a peer whose link IMEX lost is reported (``peerwatch``)."""
    retry: backoff.Backoff = dataclasses.field(
        default_factory=lambda: backoff.Backoff(initial=0.05, maximum=6.0)
    )
    """Retry policy for API writes (upstream's daemon queue: 5 ms doubling to 6 s, ±25 %;
    we start at 50 ms so a conflict storm among 18 daemons settles without hammering)."""
    deregister_timeout: float = 10.0
    """Seconds the shutdown may spend removing our clique entry (upstream: 10 s)."""
    metrics_port: int = 0
    """Port of ``/metrics`` and ``/readyz`` (the kubelet's probes) on the pod IP
    (``METRICS_PORT``; the controller's DaemonSet sets it); 0 serves none."""
    resident: bool = False
    """Run by a resident IMEX agent (``agent.app``) inside its own, long-lived pod, not by a
    per-CD daemon pod. The agent labels its pod for the CD, clique ID included, in one patch
    before the daemon starts, so the daemon does not label it again; and our entry's status is
    this daemon's own IMEX check alone, not gated on the pod's ``Ready`` condition: the agent's
    ``/readyz`` answers the kubelet from that same check, so the condition would only add the
    readiness probe's period (up to 5 s a node in an 18-node formation; a per-CD pod's fresh
    startup probe answers within 1 s), and a condition that predates the formation cannot make
    the entry Ready here, since it is never consulted. Who reads the entry still checks the
    pod: the controller counts a node Ready only while its agent pod is Ready too."""
    ready_signal: bool = False
    """(Resident only.) Our pod declares the IMEX readiness signal (``api.imexsignal.DECLARED``,
    in the agent DaemonSet's template): our own IMEX check is written as that signal on our pod
    (``daemon.podsignal``), never into our clique entry, whose status the controller writes
    from the signals of the clique's nodes, in one patch (docs/decisions/0025). Without it, the
    daemon writes its entry's status itself, as before."""
    kube: kube.KubeSettings = dataclasses.field(
        default_factory=lambda: kube.KubeSettings(field_manager="compute-domain-daemon")
    )
    """API access: in-cluster from the pod's ServiceAccount unless a kubeconfig is given."""

    @property
    def imex_domain_identity(self) -> str:
        """The IMEX domain's identity the names are made from: ``imex_domain``, else the CD's
        UID; "" (no infix) with ``nvidia_peer_names``."""
        if self.nvidia_peer_names:
            return ""
        return self.imex_domain or self.identity.domain_uid

    def validate(self) -> None:
        """Reject settings the daemon cannot work with.

        Raises:
            ConfigError: a required identity field is missing or malformed.
        """
        ident = self.identity
        if not ident.domain_uid:
            raise errors.ConfigError(f"COMPUTE_DOMAIN_UUID is empty: {CDI_HINT}")
        missing = [
            flag
            for flag, value in (
                ("--node-name/NODE_NAME", ident.node_name),
                ("--pod-name/POD_NAME", ident.pod_name),
                ("--pod-namespace/POD_NAMESPACE", ident.pod_namespace),
                ("--pod-uid/POD_UID", ident.pod_uid),
            )
            if not value
        ]
        if missing:
            raise errors.ConfigError(f"missing daemon identity: {', '.join(missing)}")
        if not 0 <= self.metrics_port <= 65535:
            raise errors.ConfigError(f"METRICS_PORT out of range: {self.metrics_port}")
        if not ident.has_clique:
            return
        try:
            ipaddress.ip_address(ident.pod_ip)
        except ValueError as err:
            raise errors.ConfigError(f"--pod-ip/POD_IP {ident.pod_ip!r} is not an IP") from err
        if self.max_nodes < 1:
            raise errors.ConfigError(
                f"MAX_NODES_PER_IMEX_DOMAIN must be >= 1, got {self.max_nodes}"
            )
