"""The platform job controller of the deployment guide (§15.5, §15.6 rule 3): its operations.

``launch`` creates what ``plan.plan`` builds (the ComputeDomain over every allocated domain,
the shared RDMA template, one pod per node in rank order); ``replace_rank`` and
``replace_lost`` give a lost rank a new pod pinned to the rank's own domain; ``load`` reads a
launched job back from its ComputeDomain's record; ``delete`` removes the job.

Invariants:
- Nothing is created for a job whose spec or cluster cannot serve it: ``preflight`` checks, before
  the first write, that every allocated domain has as many labelled nodes as the job asks and
  (with RDMA) that the RDMA DeviceClass exists, and names every shortfall in one error.
- ``launch`` is idempotent: a second run finds its ComputeDomain (refusing one that is another
  job's), keeps every rank that already has a pod, and creates only what is missing.
- Pods are created only once the ComputeDomain's channel template exists (the driver's
  controller makes it): a pod created earlier would wait on the resource-claim controller's
  backoff instead of the template.
- A replacement is ``plan.rank_pod`` with the next generation: the same pod, the same domain pin,
  a new name; a lost pod of the rank is force-deleted first (grace period 0: on a dead node no
  kubelet will ever confirm a graceful deletion, and until it is gone the pod keeps its
  anti-affinity hold). A rank that still has a live pod is replaced only when forced.
"""

from __future__ import annotations

import dataclasses
import logging

from lightkube.resources.core_v1 import Node, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaimTemplate

from compute_domains.api import computedomain
from compute_domains.infra import errors, kube
from compute_domains.jobs import kubeio, plan, ranks
from compute_domains.jobs import spec as specs

logger = logging.getLogger(__name__)


class JobError(errors.PermanentError):
    """The job cannot be launched or changed as asked; the message says why and what to do."""


@dataclasses.dataclass(frozen=True, slots=True)
class Launched:
    """What ``launch`` did."""

    created: tuple[str, ...]
    """Objects it created (``Kind ns/name``), in creation order."""
    kept: tuple[str, ...]
    """Objects that existed already and were kept (a repeated launch)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Replaced:
    """One replacement: the rank, its domain, the pods it lost and the new one."""

    rank: int
    cluster_uuid: str
    removed: tuple[str, ...]
    """Pods of the rank deleted for it (name: reason)."""
    pod: str
    """The replacement pod's name."""


async def preflight(api: kubeio.Api, spec: specs.JobSpec) -> None:
    """Check that the cluster can hold the job (module docstring).

    Raises:
        JobError: naming every shortfall.
    """
    problems = []
    for domain in spec.domains:
        nodes = await api.list(Node, labels={specs.CLUSTER_UUID_LABEL: domain.cluster_uuid})
        if len(nodes) < domain.node_count:
            problems.append(
                f"domain {domain.cluster_uuid} has {len(nodes)} nodes labelled "
                f"{specs.CLUSTER_UUID_LABEL}={domain.cluster_uuid}, the job asks "
                f"{domain.node_count}"
            )
    if spec.rdma and await api.get(DeviceClass, spec.rdma_device_class) is None:
        problems.append(
            f"DeviceClass {spec.rdma_device_class} not found: install DRANET and the guide's "
            "RDMA DeviceClass (§3.3-3.4), or launch without RDMA (--no-rdma)"
        )
    if problems:
        raise JobError(f"job {spec.name}: " + "; ".join(problems))


async def launch(
    api: kubeio.Api, spec: specs.JobSpec, *, template_timeout_s: float = 60.0
) -> Launched:
    """Create the job's ComputeDomain, RDMA template and one pod per node (module docstring).

    Raises:
        JobSpecError: the spec is invalid.
        JobError: the cluster cannot hold the job, or its names are another job's.
        TemporaryError: the driver did not create the channel template in time.
        kube.KubeError: an API request failed.
    """
    objects = plan.plan(spec)
    await preflight(api, spec)
    created: list[str] = []
    kept: list[str] = []
    cd = objects.compute_domain
    cd_what = f"ComputeDomain {spec.namespace}/{spec.cd_name}"
    try:
        await api.create(cd)
        created.append(cd_what)
    except kube.AlreadyExists:
        existing = await load(api, spec.name, spec.namespace)
        if existing != spec:
            raise JobError(
                f"{cd_what} exists with another job's record; delete the job first "
                f"(cdctl job delete {spec.name} -n {spec.namespace}) or choose another name"
            ) from None
        kept.append(cd_what)
    if objects.rdma_template is not None:
        rct_what = f"ResourceClaimTemplate {spec.namespace}/{spec.rdma_template}"
        try:
            await api.create(objects.rdma_template)
            created.append(rct_what)
        except kube.AlreadyExists:
            kept.append(rct_what)
    try:
        await api.wait_for(
            ResourceClaimTemplate,
            spec.channel_template,
            namespace=spec.namespace,
            timeout_s=template_timeout_s,
        )
    except errors.TemporaryError as err:
        raise errors.TemporaryError(
            f"{err}: the ComputeDomain controller makes it; is the driver installed and running?"
        ) from err
    states = await status(api, spec)
    for pod, state in zip(objects.pods, states, strict=True):
        name = str(pod.metadata.name) if pod.metadata else ""
        if state.pods:
            kept.append(f"Pod {spec.namespace}/{name}")
            continue
        await api.create(pod)
        created.append(f"Pod {spec.namespace}/{name}")
    logger.info(
        "job %s/%s launched: %d created, %d kept",
        spec.namespace,
        spec.name,
        len(created),
        len(kept),
    )
    return Launched(tuple(created), tuple(kept))


async def load(api: kubeio.Api, job: str, namespace: str) -> specs.JobSpec:
    """The spec of the launched job ``job``, from its ComputeDomain's record.

    Raises:
        JobError: there is no such job (or its ComputeDomain has no record).
    """
    name = f"{job}-cd"
    cd = await api.get(computedomain.ComputeDomainResource, name, namespace=namespace)
    if cd is None:
        raise JobError(f"no job {job} in namespace {namespace}: ComputeDomain {name} not found")
    annotations = (cd.metadata.annotations if cd.metadata else None) or {}
    record = annotations.get(plan.JOB_ANNOTATION)
    if record is None:
        raise JobError(
            f"ComputeDomain {namespace}/{name} was not made by the job controller "
            f"(no {plan.JOB_ANNOTATION} annotation)"
        )
    return specs.from_record(record)


async def status(api: kubeio.Api, spec: specs.JobSpec) -> list[ranks.RankState]:
    """Every rank's state now (``ranks.rank_states`` over the job's pods and the nodes)."""
    pods = await api.list(Pod, namespace=spec.namespace, labels={plan.JOB_LABEL: spec.name})
    nodes = await api.list(Node)
    uuids = [specs.domain_of(spec, r).cluster_uuid for r in range(spec.world_size)]
    return ranks.rank_states(uuids, pods, nodes)


async def replace(api: kubeio.Api, spec: specs.JobSpec, state: ranks.RankState) -> Replaced:
    """Force-delete ``state``'s lost pods and create the rank's next pod (module docstring);
    the caller decided that the rank needs it (``replace_rank``, ``replace_lost``, ``keeper``)."""
    removed = []
    for pod, why in state.lost:
        name = str(pod.metadata.name) if pod.metadata else ""
        await api.delete(Pod, name, namespace=spec.namespace, grace_period=0)
        removed.append(f"{name}: {why}")
    new = plan.rank_pod(spec, state.rank, state.next_generation)
    await api.create(new)
    name = str(new.metadata.name) if new.metadata else ""
    logger.info(
        "job %s/%s: rank %d replaced by pod %s in domain %s (%s)",
        spec.namespace,
        spec.name,
        state.rank,
        name,
        state.cluster_uuid,
        "; ".join(removed) or "no pod left",
    )
    return Replaced(state.rank, state.cluster_uuid, tuple(removed), name)


async def replace_rank(
    api: kubeio.Api, spec: specs.JobSpec, rank: int, *, force: bool = False
) -> Replaced:
    """Give ``rank`` a new pod pinned to its own domain (§15.6 rule 3).

    Raises:
        JobSpecError: the job has no such rank.
        JobError: the rank still has a live pod and ``force`` is False.
    """
    specs.domain_of(spec, rank)  # a clear error for a rank the job does not have
    state = (await status(api, spec))[rank]
    if state.live is not None:
        pod = state.live
        name = str(pod.metadata.name) if pod.metadata else ""
        if not force:
            node = (pod.spec.nodeName if pod.spec else None) or "no node yet"
            phase = (pod.status.phase if pod.status else None) or "Pending"
            raise JobError(
                f"rank {rank} of job {spec.name} is served by pod {name} ({phase}, {node}); "
                "replace it anyway with --force"
            )
        state = dataclasses.replace(state, lost=(*state.lost, (pod, "replaced on request")))
    return await replace(api, spec, state)


async def replace_lost(api: kubeio.Api, spec: specs.JobSpec) -> list[Replaced]:
    """Replace every lost rank (``ranks`` module docstring), each in its own domain."""
    return [await replace(api, spec, s) for s in await status(api, spec) if s.is_lost]


async def delete(api: kubeio.Api, spec: specs.JobSpec) -> list[str]:
    """Delete the job's pods, its RDMA template and its ComputeDomain (which takes its channel
    template with it); returns what was deleted."""
    gone = []
    for pod in await api.list(Pod, namespace=spec.namespace, labels={plan.JOB_LABEL: spec.name}):
        name = str(pod.metadata.name) if pod.metadata else ""
        if await api.delete(Pod, name, namespace=spec.namespace):
            gone.append(f"Pod {spec.namespace}/{name}")
    if spec.rdma and await api.delete(
        ResourceClaimTemplate, spec.rdma_template, namespace=spec.namespace
    ):
        gone.append(f"ResourceClaimTemplate {spec.namespace}/{spec.rdma_template}")
    if await api.delete(
        computedomain.ComputeDomainResource, spec.cd_name, namespace=spec.namespace
    ):
        gone.append(f"ComputeDomain {spec.namespace}/{spec.cd_name}")
    return gone
