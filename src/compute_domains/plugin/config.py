"""Settings of the kubelet plugin: one frozen dataclass per concern, validated at construction.

Only ``cli/`` builds these from flags and environment; every module below receives the narrowest
object it needs (the CDI writer gets a folder, the retry loop gets ``RetrySettings``).

Paths come in two kinds, and the difference matters to the simulator:
- *Host paths* (``registrar_dir``, ``plugins_dir``, ``cdi_root``) are what the kubelet and the
  container runtime see: the registration answer names the DRA socket by its host path, and CDI
  mounts name host folders. In production the chart mounts them into the plugin container at the
  same paths, so ``host_root`` is ``/``. A plugin hosted in a test process for a simulated node
  sets ``host_root`` to that node's root folder; it then reads and writes ``host_root/<path>``
  while still telling the kubelet ``<path>``.
- *Local paths* (``proc_devices``, ``boot_id``, ``fabric_imex_mgmt``, ``imex_config_template``)
  are read by this process as they are; the chart mounts the host's files at ``/host/...``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from compute_domains.api import names, nodemark
from compute_domains.infra import errors, kube

MAX_CHANNEL_SLOTS = 127
"""A ResourceSlice holds at most 128 devices; one of them is ``daemon-0``."""
SHARED_IMEX_DIR = "shared-imex"
"""Name of the shared IMEX folder among the per-CD folders (no CD UID looks like it)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PathSettings:
    """Where the plugin's files and sockets live (see the module docstring for the two kinds)."""

    host_root: Path = Path("/")
    """Where this process finds the node's host filesystem; ``/`` in production."""
    registrar_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    """Host path of the kubelet's plugin-registration folder (the registration socket goes here)."""
    plugins_dir: Path = Path("/var/lib/kubelet/plugins")
    """Host path of the kubelet's plugin data folder; ours is ``<this>/<driver name>``."""
    cdi_root: Path = Path("/var/run/cdi")
    """Host path of the runtime's dynamic CDI spec folder."""
    proc_devices: Path = Path("/proc/devices")
    """Local path of the kernel's device-major table (the chart mounts it at /host/proc/devices)."""
    boot_id: Path = Path("/proc/sys/kernel/random/boot_id")
    """Local path of the kernel boot ID (the chart mounts it at /host/boot_id)."""
    fabric_imex_mgmt: Path = Path("/proc/driver/nvidia/capabilities/fabric-imex-mgmt")
    """Local path of the fabric-imex-mgmt capability file (daemon claims on MNNVL nodes)."""
    driver_root: Path = Path("/")
    """Host path of the NVIDIA driver installation (``/``, or ``/run/nvidia/driver`` with the GPU
    operator); the base CDI spec mounts the IMEX programs and driver files from there."""
    driver_root_local: Path | None = None
    """Where this process sees the driver root (the chart mounts it at ``/driver-root``); None
    reaches it like any host path (``local(driver_root)``)."""
    imex_config_template: Path | None = None
    """Local IMEX config template copied to ``domains/<cdUID>/imexd.cfg.tmpl`` for daemon claims;
    None places none, and the daemon renders its built-in template."""

    def local(self, host_path: Path) -> Path:
        """Where this process reaches ``host_path``."""
        return self.host_root / host_path.relative_to(host_path.anchor)

    @property
    def driver_root_view(self) -> Path:
        """Where this process reads the driver root."""
        if self.driver_root_local is not None:
            return self.driver_root_local
        return self.local(self.driver_root)

    @property
    def plugin_dir(self) -> Path:
        """Host path of our data folder (sockets, checkpoint, lock, per-CD folders)."""
        return self.plugins_dir / names.DRIVER_NAME

    @property
    def dra_socket(self) -> Path:
        """Host path of the DRA gRPC socket (the endpoint the kubelet dials)."""
        return self.plugin_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        """Host path of the plugin-registration socket."""
        return self.registrar_dir / f"{names.DRIVER_NAME}-reg.sock"

    @property
    def domains_dir(self) -> Path:
        """Host path of the per-ComputeDomain folders (mounted at ``/imexd`` in daemons)."""
        return self.plugin_dir / "domains"

    @property
    def shared_imex_dir(self) -> Path:
        """Host path of the clique's shared IMEX folder (the resident agent writes its IMEX
        files there; per-clique workloads see it read-only at ``/imexd``). Never a CD's."""
        return self.domains_dir / SHARED_IMEX_DIR


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RetrySettings:
    """Bounds of the work done inside one kubelet call (the kubelet gives up after 45 s)."""

    budget_s: float = 40.0
    """Seconds a claim may be retried within one NodePrepare/NodeUnprepare call (< 45 s)."""
    initial_backoff_s: float = 0.25
    """First retry delay in seconds (doubling; upstream's 250 ms)."""
    max_backoff_s: float = 3.0
    """Cap on the retry delay in seconds (upstream's 3 s)."""
    readiness_timeout_s: float = 30.0
    """Longest wait in seconds for this node's IMEX daemon to turn Ready in one attempt."""
    lock_timeout_s: float = 10.0
    """Seconds to wait for the node-local lock file held by another plugin process."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CleanupSettings:
    """Background reconciliation of state that no live claim needs any more."""

    interval_s: float = 300.0
    """Seconds between cleanup passes (the first pass runs at start-up)."""
    claim_get_timeout_s: float = 20.0
    """Timeout in seconds of one ResourceClaim read during a pass."""
    tombstone_ttl_s: float = 900.0
    """Seconds an ``UnprepareCompleted`` tombstone is kept to refuse late prepares."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class MetricsSettings:
    """The Prometheus endpoint (``/metrics``) and the HTTP health endpoint (``/healthz``)."""

    port: int | None = None
    """TCP port; None serves nothing (0 picks a free port, for tests)."""
    bind_address: str = "0.0.0.0"
    """Address to listen on; the chart passes the pod IP."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PluginSettings:
    """Everything one plugin instance needs; immutable after start-up."""

    node_name: str
    """The node this plugin serves; also the ResourceSlice pool name."""
    driver_namespace: str
    """Namespace of the driver (ComputeDomainCliques are read there)."""
    paths: PathSettings = dataclasses.field(default_factory=PathSettings)
    retry: RetrySettings = dataclasses.field(default_factory=RetrySettings)
    cleanup: CleanupSettings = dataclasses.field(default_factory=CleanupSettings)
    metrics: MetricsSettings = dataclasses.field(default_factory=MetricsSettings)
    kube: kube.KubeSettings = dataclasses.field(default_factory=kube.KubeSettings)
    channel_slots: int = 8
    """Channel devices published per node (``channel-0..K-1``): how many workload claims (pods)
    of one ComputeDomain can share this node."""
    holder_publish_delay_s: float = 0.0
    """Seconds between a change of the node's holder and the republish of the ResourceSlice that
    advertises it. 0 (production): at once. A fault drill's knob (issue 29): the e2e race test
    sets it so that two ComputeDomains' claims are both allocated on a node before its holder
    shows, the interleaving a busy scheduler produces by chance."""
    strict_fabric: bool = True
    """Refuse to start while a GPU's NVLink fabric is registering or in error (upstream's
    ``CrashOnNVLinkFabricErrors``); False treats such GPUs as not fabric-attached."""
    health_port: int | None = None
    """TCP port of the optional ``grpc.health.v1.Health`` service; None serves none."""
    quarantine_corrupt_checkpoint: bool = False
    """On a corrupt checkpoint, move it aside and start empty instead of refusing to start."""
    shared_imex_eager: bool = False
    """Issue 26's per-clique scope: label the node ``compute-domains/shared-imex=on`` at start
    (on a node with a clique ID, unless a per-domain CD holds it; then once its last claim
    goes), so the clique's shared IMEX already runs before the first per-clique CD and
    formation pays no IMEX start. False (default): the first per-clique claim labels the node,
    and a start with no per-clique claim live removes the label, so a cluster switched back to
    ``perDomain`` frees its idle nodes (``eager``)."""
    node_mark: nodemark.Form = nodemark.Form.LABEL
    """How the node is marked for the per-domain CD it serves (``api.nodemark``): NVIDIA's node
    label (default; a per-CD DaemonSet selects its nodes by it), or an annotation of the same
    key (resident agents only, the chart's ``imex.nodeMark``), on which kube-scheduler re-queues
    no parked pod."""

    def __post_init__(self) -> None:
        if not self.node_name:
            raise errors.ConfigError("the node name is required (--node-name / NODE_NAME)")
        if not self.driver_namespace:
            raise errors.ConfigError("the driver namespace is required (--namespace)")
        if not 1 <= self.channel_slots <= MAX_CHANNEL_SLOTS:
            raise errors.ConfigError(
                f"channel slots must be in 1..{MAX_CHANNEL_SLOTS}, got {self.channel_slots}"
            )
        if not 0 <= self.holder_publish_delay_s <= 30:
            raise errors.ConfigError(
                f"holder publish delay must be in 0..30 s, got {self.holder_publish_delay_s}"
            )
        retry = self.retry
        if retry.readiness_timeout_s >= retry.budget_s or retry.budget_s >= 45.0:
            raise errors.ConfigError(
                "retry budget must stay below the kubelet's 45 s and above the readiness timeout"
            )
        for label, path in (
            ("registrar dir", self.paths.registrar_dir),
            ("plugins dir", self.paths.plugins_dir),
            ("CDI root", self.paths.cdi_root),
        ):
            if not path.is_absolute():
                raise errors.ConfigError(f"the {label} must be an absolute path, got {path}")
