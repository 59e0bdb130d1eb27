"""The objects of a §15.5 job, built by pure functions: domains → ComputeDomain, template, pods.

The guide's pseudo-code (shared/seeds/002 §15.5) as data: ``plan(spec)`` returns

1. one ComputeDomain over every allocated domain (``numNodes`` = the job's node total), its
   channel template named ``<job>-imex-channel`` (the driver's controller creates it);
2. one shared RDMA ResourceClaimTemplate (``<job>-rdma``: ``count`` NICs of DeviceClass
   ``rdma-devices``, as in §3.4), unless the job runs without RDMA;
3. one pod per node, in rank order, that differ only in their rank and in the
   ``nvidia.com/gpu.clusteruuid`` their ``nodeAffinity`` requires; each has the guide's
   ``podAntiAffinity`` on the ``job`` label (one pod per node), the GPUs, and the two claims
   every pod shares the templates of (``compute-domain-channel``, ``rdma-nics``).

``rank_pod(spec, rank, generation)`` is the one pod builder, for the first pod of a rank and for
each replacement alike: a replacement is the same pod under a new name, so it is pinned to the
rank's own domain by construction (§15.6 rule 3: never across domains).

Nothing here talks to the API server; ``jobs.launcher`` creates what these functions build.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from lightkube.generic_resource import GenericNamespacedResource
from lightkube.models.core_v1 import (
    Affinity,
    Container,
    EnvVar,
    NodeAffinity,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodAffinityTerm,
    PodAntiAffinity,
    PodResourceClaim,
    PodSpec,
    ResourceClaim,
    ResourceRequirements,
)
from lightkube.models.meta_v1 import LabelSelector, LabelSelectorRequirement, ObjectMeta
from lightkube.models.resource_v1 import (
    DeviceClaim,
    DeviceRequest,
    ExactDeviceRequest,
    ResourceClaimSpec,
    ResourceClaimTemplateSpec,
)
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from compute_domains.api import computedomain, names
from compute_domains.jobs import spec as specs

JOB_LABEL: Final = "job"
"""The guide's pod label, selected by its ``podAntiAffinity``; value: the job name."""
JOB_OBJECT_LABEL: Final = "compute-domains/job"
"""Label on the job's ComputeDomain and RDMA template; value: the job name."""
RANK_LABEL: Final = "compute-domains/rank"
"""Label on each pod: its rank (decimal)."""
GENERATION_LABEL: Final = "compute-domains/generation"
"""Label on each pod: 0 for a rank's first pod, n for its n-th replacement."""
DOMAIN_LABEL: Final = "compute-domains/cluster-uuid"
"""Label on each pod: the cluster UUID of the domain its rank is pinned to."""
JOB_ANNOTATION: Final = "compute-domains/job"
"""Annotation on the job's ComputeDomain: the job's record (``spec.to_record``)."""
CHANNEL_CLAIM: Final = "compute-domain-channel"
"""The pods' claim of the ComputeDomain's channel (the guide's name)."""
RDMA_CLAIM: Final = "rdma-nics"
"""The pods' claim of RDMA NICs (the guide's name)."""
RDMA_REQUEST: Final = "rdma-nics"
"""The request name inside the RDMA template (the guide's)."""
CONTAINER: Final = "trainer"
"""Name of each pod's one container (the guide's)."""
GPU_RESOURCE: Final = "nvidia.com/gpu"


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """Everything ``launch`` creates, in creation order."""

    compute_domain: GenericNamespacedResource
    rdma_template: ResourceClaimTemplate | None
    """None when the job runs without RDMA."""
    pods: tuple[Pod, ...]
    """One per rank, rank 0 first."""


def pod_name(job: str, rank: int, generation: int) -> str:
    """``train-5`` for rank 5's first pod (the guide's ``f"train-{rank}"`` for a job named
    ``train``), ``train-5-r2`` for its second replacement."""
    base = f"{job}-{rank}"
    return base if generation == 0 else f"{base}-r{generation}"


def compute_domain(spec: specs.JobSpec) -> GenericNamespacedResource:
    """The one ComputeDomain over every allocated domain (§15.5 step 1), carrying the job's
    record so that later operations need nothing but the cluster."""
    cd_spec = computedomain.ComputeDomainSpec(
        num_nodes=spec.world_size,
        channel=computedomain.ChannelSpec(
            resource_claim_template=computedomain.ResourceClaimTemplateRef(
                name=spec.channel_template
            )
        ),
    )
    return computedomain.ComputeDomainResource(
        apiVersion=names.API_VERSION,
        kind=names.COMPUTE_DOMAIN_KIND,
        metadata=ObjectMeta(
            name=spec.cd_name,
            namespace=spec.namespace,
            labels={JOB_OBJECT_LABEL: spec.name},
            annotations={JOB_ANNOTATION: specs.to_record(spec)},
        ),
        spec=cd_spec.to_dict(),
    )


def rdma_template(spec: specs.JobSpec) -> ResourceClaimTemplate:
    """The shared RDMA template (§15.5 step 2): each pod's claim from it gets ``rdma_nics``
    NICs of the RDMA DeviceClass."""
    request = DeviceRequest(
        name=RDMA_REQUEST,
        exactly=ExactDeviceRequest(deviceClassName=spec.rdma_device_class, count=spec.rdma_nics),
    )
    return ResourceClaimTemplate(
        metadata=ObjectMeta(
            name=spec.rdma_template,
            namespace=spec.namespace,
            labels={JOB_OBJECT_LABEL: spec.name},
        ),
        spec=ResourceClaimTemplateSpec(
            spec=ResourceClaimSpec(devices=DeviceClaim(requests=[request]))
        ),
    )


def _affinity(spec: specs.JobSpec, cluster_uuid: str) -> Affinity:
    pin = NodeSelectorRequirement(
        key=specs.CLUSTER_UUID_LABEL, operator="In", values=[cluster_uuid]
    )
    one_per_node = PodAffinityTerm(
        labelSelector=LabelSelector(
            matchExpressions=[
                LabelSelectorRequirement(key=JOB_LABEL, operator="In", values=[spec.name])
            ]
        ),
        topologyKey="kubernetes.io/hostname",
    )
    return Affinity(
        nodeAffinity=NodeAffinity(
            requiredDuringSchedulingIgnoredDuringExecution=NodeSelector(
                nodeSelectorTerms=[NodeSelectorTerm(matchExpressions=[pin])]
            )
        ),
        podAntiAffinity=PodAntiAffinity(
            requiredDuringSchedulingIgnoredDuringExecution=[one_per_node]
        ),
    )


def rank_pod(spec: specs.JobSpec, rank: int, generation: int = 0) -> Pod:
    """The pod of ``rank`` (its ``generation``-th replacement for ``generation > 0``), pinned to
    the rank's domain (§15.5 step 3, §15.6 rule 3).

    Raises:
        JobSpecError: the job has no such rank.
    """
    domain = specs.domain_of(spec, rank)
    claims = [PodResourceClaim(name=CHANNEL_CLAIM, resourceClaimTemplateName=spec.channel_template)]
    if spec.rdma:
        claims.append(
            PodResourceClaim(name=RDMA_CLAIM, resourceClaimTemplateName=spec.rdma_template)
        )
    container = Container(
        name=CONTAINER,
        image=spec.image,
        command=list(spec.command) or None,
        env=[
            EnvVar(name="RANK", value=str(rank)),
            EnvVar(name="WORLD_SIZE", value=str(spec.world_size)),
        ],
        resources=ResourceRequirements(
            limits={GPU_RESOURCE: str(spec.gpus)} if spec.gpus else None,
            claims=[ResourceClaim(name=c.name) for c in claims],
        ),
    )
    return Pod(
        metadata=ObjectMeta(
            name=pod_name(spec.name, rank, generation),
            namespace=spec.namespace,
            labels={
                JOB_LABEL: spec.name,
                RANK_LABEL: str(rank),
                GENERATION_LABEL: str(generation),
                DOMAIN_LABEL: domain.cluster_uuid,
            },
        ),
        spec=PodSpec(
            priorityClassName=spec.priority_class or None,
            affinity=_affinity(spec, domain.cluster_uuid),
            containers=[container],
            resourceClaims=claims,
        ),
    )


def plan(spec: specs.JobSpec) -> Plan:
    """Every object of the job, in the order ``launch`` creates them.

    Raises:
        JobSpecError: the spec is invalid (``spec.validate`` names every problem).
    """
    specs.checked(spec)
    return Plan(
        compute_domain=compute_domain(spec),
        rdma_template=rdma_template(spec) if spec.rdma else None,
        pods=tuple(rank_pod(spec, rank) for rank in range(spec.world_size)),
    )
