"""The per-ComputeDomain daemon DaemonSet, rendered as a typed lightkube object.

Rendering follows upstream (spec §7.3) field for field, with these deliberate differences:
- the container runs the project image's ``cdctl daemon run``; all three probes are ``httpGet``
  of ``/readyz`` on the container's ``metrics`` port (upstream: exec ``compute-domain-daemon
  check``), which the daemon answers from its own IMEX check (``nvidia-imex-ctl -q`` =
  ``READY``, the check upstream's exec runs; ``daemon/health.py``), so no probe starts a
  process (docs/decisions/0008-daemon-answers-its-probes.md); with no metrics port (0) the
  daemon serves nothing and the probes exec ``cdctl daemon check``, the same check;
- the startup probe runs every second, so a new daemon turns Ready about a second after its IMEX
  service does; afterwards the readiness probe runs every 5 s (upstream: 10 s), the pace of the
  daemon's own check once READY;
- no ``FEATURE_GATES`` env (we have no feature gates); ``CD_LOG_LEVEL``/``CD_LOG_FORMAT`` are
  added so the daemon's ``cdctl`` logs at the controller's chosen level and format;
- ``METRICS_PORT``, a container port ``metrics`` and Prometheus scrape annotations: the daemon
  serves ``/metrics`` (``daemon.metrics``) and ``/readyz`` on its pod IP;
- from the settings (chart values ``daemon.priorityClass`` and ``daemon.resources``): a
  ``priorityClassName`` (the chart's own non-preempting class by default, so daemons are
  scheduled ahead of other pending pods, issue 15) and cpu/memory with requests equal to
  limits, which gives the daemon pods Guaranteed QoS (upstream sets neither).

Warm spares (``warm``, issue 16): for a CD with the ``compute-domains/warm-nodes`` annotation the
node selector becomes a required node affinity, the CD's label OR its warm-spare label; for any
other CD the rendering is unchanged, so an upgrade restarts no daemon.

Identity: name ``computedomain-daemon-<cdUID>`` in the driver namespace, label and finalizer
``resource.nvidia.com/computeDomain``, no owner references (the controller deletes it). The
pod template selects nodes labelled with the CD's UID, tolerates every taint, and claims the
daemon device through the daemon ResourceClaimTemplate of the same name.
"""

from __future__ import annotations

from typing import Final

from lightkube.models.apps_v1 import DaemonSetSpec
from lightkube.models.core_v1 import (
    Affinity,
    Container,
    ContainerPort,
    EnvVar,
    EnvVarSource,
    ExecAction,
    HTTPGetAction,
    LocalObjectReference,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    ObjectFieldSelector,
    PodResourceClaim,
    PodSpec,
    PodTemplateSpec,
    Probe,
    ResourceClaim,
    ResourceRequirements,
    Toleration,
)
from lightkube.models.meta_v1 import LabelSelector, ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet

from compute_domains.api import names
from compute_domains.controller import config

DAEMON_COMMAND: Final = ("cdctl", "daemon", "run")
"""What the daemon container runs (the project image's console script)."""
CHECK_COMMAND: Final = ("cdctl", "daemon", "check")
"""What the probes run when the daemon serves no port (the same IMEX check, by exec)."""
METRICS_PORT_NAME: Final = "metrics"
"""Name of the daemon container's port: ``/metrics``, and ``/readyz`` that its probes ask."""
_TOLERATED_EFFECTS: Final = ("NoSchedule", "NoExecute", "PreferNoSchedule")


def _field_env(name: str, path: str) -> EnvVar:
    return EnvVar(name=name, valueFrom=EnvVarSource(fieldRef=ObjectFieldSelector(fieldPath=path)))


def _probe(settings: config.DaemonSettings, *, period: int, failures: int) -> Probe:
    served = bool(settings.metrics_port)
    return Probe(
        httpGet=HTTPGetAction(path=names.DAEMON_HEALTH_PATH, port=METRICS_PORT_NAME)
        if served
        else None,
        exec=None if served else ExecAction(command=list(CHECK_COMMAND)),
        initialDelaySeconds=0,
        periodSeconds=period,
        timeoutSeconds=10,
        failureThreshold=failures,
        successThreshold=1,
    )


def _env(settings: config.DaemonSettings) -> list[EnvVar]:
    return [
        EnvVar(name="LOG_VERBOSITY", value=settings.log_level),
        EnvVar(name="CD_LOG_LEVEL", value=settings.log_level),
        EnvVar(name="CD_LOG_FORMAT", value=settings.log_format),
        EnvVar(name="MAX_NODES_PER_IMEX_DOMAIN", value=str(settings.max_nodes_per_imex_domain)),
        _field_env("NODE_NAME", "spec.nodeName"),
        _field_env("POD_IP", "status.podIP"),
        _field_env("POD_UID", "metadata.uid"),
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
        EnvVar(name="NVIDIA_VISIBLE_DEVICES", value="void"),
        *(
            [EnvVar(name="METRICS_PORT", value=str(port))]
            if (port := settings.metrics_port)
            else []
        ),
    ]


def _scrape(settings: config.DaemonSettings) -> dict[str, str] | None:
    if not settings.metrics_port:
        return None
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(settings.metrics_port)}


def _resources(settings: config.DaemonSettings) -> ResourceRequirements:
    """The daemon claim, and cpu/memory as request = limit (Guaranteed QoS with both)."""
    amounts = {k: v for k, v in (("cpu", settings.cpu), ("memory", settings.memory)) if v}
    return ResourceRequirements(
        claims=[ResourceClaim(name=names.DAEMON_POD_CLAIM)],
        requests=dict(amounts) or None,
        limits=dict(amounts) or None,
    )


def _term(key: str, value: str) -> NodeSelectorTerm:
    return NodeSelectorTerm(
        matchExpressions=[NodeSelectorRequirement(key=key, operator="In", values=[value])]
    )


def warm_affinity(domain_uid: str) -> Affinity:
    """Nodes labelled for CD ``domain_uid`` by a claim (``computeDomain``) OR as its warm spares."""
    terms = [_term(names.COMPUTE_DOMAIN_LABEL, domain_uid), _term(names.WARM_FOR_LABEL, domain_uid)]
    return Affinity(
        nodeAffinity=NodeAffinity(
            requiredDuringSchedulingIgnoredDuringExecution=NodeSelector(nodeSelectorTerms=terms)
        )
    )


def render(
    *, domain_uid: str, namespace: str, settings: config.DaemonSettings, warm: bool = False
) -> DaemonSet:
    """The DaemonSet of the CD with UID ``domain_uid`` in the driver ``namespace``.

    ``warm`` (the CD has the warm-nodes annotation): a required node affinity with two ORed
    terms, the CD's ``computeDomain`` label or its warm-spare label, replaces the node selector.
    Without it the rendering is exactly that of before warm spares existed.
    """
    name = names.daemon_object_name(domain_uid)
    labels = {names.COMPUTE_DOMAIN_LABEL: domain_uid}
    container = Container(
        name=names.DAEMON_POD_CLAIM,
        image=settings.image,
        command=list(DAEMON_COMMAND),
        env=_env(settings),
        ports=[ContainerPort(name=METRICS_PORT_NAME, containerPort=settings.metrics_port)]
        if settings.metrics_port
        else None,
        resources=_resources(settings),
        startupProbe=_probe(settings, period=1, failures=1200),
        livenessProbe=_probe(settings, period=60, failures=20),
        readinessProbe=_probe(settings, period=5, failures=1),
    )
    pod_spec = PodSpec(
        serviceAccountName=names.DAEMON_SERVICE_ACCOUNT,
        priorityClassName=settings.priority_class_name or None,
        imagePullSecrets=[LocalObjectReference(name=s) for s in settings.image_pull_secrets]
        or None,
        nodeSelector=None if warm else dict(labels),
        affinity=warm_affinity(domain_uid) if warm else None,
        tolerations=[Toleration(operator="Exists", effect=e) for e in _TOLERATED_EFFECTS],
        resourceClaims=[
            PodResourceClaim(name=names.DAEMON_POD_CLAIM, resourceClaimTemplateName=name)
        ],
        containers=[container],
    )
    return DaemonSet(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            labels=dict(labels),
            finalizers=[names.FINALIZER],
        ),
        spec=DaemonSetSpec(
            selector=LabelSelector(matchLabels=dict(labels)),
            template=PodTemplateSpec(
                metadata=ObjectMeta(labels=dict(labels), annotations=_scrape(settings)),
                spec=pod_spec,
            ),
        ),
    )


def is_warm(ds: DaemonSet) -> bool:
    """Whether a DaemonSet (as stored) places its pods with the warm-spares node affinity."""
    spec = ds.spec.template.spec if ds.spec is not None else None
    return spec is not None and spec.affinity is not None and spec.affinity.nodeAffinity is not None


def placement_patch(domain_uid: str, *, warm: bool) -> dict[str, object]:
    """A merge patch that gives a stored DaemonSet the placement ``render`` would give it now."""
    labels = {names.COMPUTE_DOMAIN_LABEL: domain_uid}
    placement: dict[str, object] = {
        "nodeSelector": None if warm else labels,
        "affinity": warm_affinity(domain_uid).to_dict() if warm else None,
    }
    return {"spec": {"template": {"spec": placement}}}
