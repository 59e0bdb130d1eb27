"""What a platform job is: the allocated NVLink domains, the pod each rank runs, the names.

The deployment guide's platform scheduler (shared/seeds/002 §15.5) hands the job controller a
list of allocated domains, each a ``nvidia.com/gpu.clusteruuid`` and a node count. ``JobSpec``
holds that list together with what every rank's pod runs, and derives the names of the objects
the job owns exactly as the guide spells them for a job called ``training-job``:
``training-job-cd`` (the ComputeDomain), ``training-job-imex-channel`` (its channel template),
``training-job-rdma`` (the shared RDMA template) and ``training-job-<rank>`` (the pods).

Invariants:
- Ranks are numbered in domain order: the first domain's nodes take ranks ``0..n0-1``, the
  second's ``n0..n0+n1-1``, and so on (§15.5's loop), so a rank's domain is a pure function
  of the spec (``domain_of``); a replacement is pinned to it (§15.6 rule 3).
- ``validate`` accepts only a spec whose every derived name and label value the API server
  accepts, so a bad input fails before anything is created, with every problem named.
- ``to_record``/``from_record`` round-trip the spec through JSON: the record is kept on the
  job's ComputeDomain, so a rank can be replaced later from the cluster alone.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Final

from compute_domains.infra import errors

CLUSTER_UUID_LABEL: Final = "nvidia.com/gpu.clusteruuid"
"""Node label (GPU Feature Discovery) naming a node's NVLink domain; the guide pins pods by it."""
RDMA_DEVICE_CLASS: Final = "rdma-devices"
"""The guide's DeviceClass of DRANET's RDMA NICs (§3.4)."""
DEFAULT_IMAGE: Final = "nvcr.io/nvidia/pytorch:25.04-py3"
"""The guide's training image (§15.4)."""
RECORD_VERSION: Final = 1
"""Version of the JSON record kept on the ComputeDomain (``from_record`` reads only this one)."""

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_VALUE: Final = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_NAME_MAX: Final = 40
"""Longest job name: ``<name>-imex-channel`` and ``<name>-<rank>-r<generation>`` stay well
inside the 63 characters of a label value and a DNS label."""


class JobSpecError(errors.PermanentError):
    """The job as given cannot be created; the message lists every problem."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Domain:
    """One NVLink domain the platform scheduler allocated to the job."""

    cluster_uuid: str
    """The domain's ``nvidia.com/gpu.clusteruuid`` node label value."""
    node_count: int
    """How many of its nodes the job gets: one rank (one pod) per node."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class JobSpec:
    """A §15.5 training job: its domains in rank order and the pod every rank runs."""

    name: str
    """The job's name: the pods' ``job`` label and the prefix of every object it owns."""
    domains: tuple[Domain, ...]
    """The allocated domains, in rank order (ranks fill the first domain first)."""
    namespace: str = "default"
    """Namespace of the ComputeDomain, the templates and the pods."""
    image: str = DEFAULT_IMAGE
    """Container image of every rank."""
    command: tuple[str, ...] = ()
    """The container's command; empty runs the image's entrypoint."""
    gpus: int = 4
    """``nvidia.com/gpu`` limit of each pod (a GB200 node has 4)."""
    rdma: bool = True
    """Give every pod the shared RDMA claim (DRANET, guide path A); False for path B or a
    cluster without DRANET."""
    rdma_nics: int = 4
    """RDMA NICs per pod (the RDMA template's ``count``)."""
    rdma_device_class: str = RDMA_DEVICE_CLASS
    """DeviceClass of the RDMA request."""
    priority_class: str = ""
    """``priorityClassName`` of every pod ("" for none); §15.6 uses ``training-high-priority``."""

    @property
    def world_size(self) -> int:
        """How many ranks (pods, nodes) the job has: the sum of the domains' node counts."""
        return sum(d.node_count for d in self.domains)

    @property
    def cd_name(self) -> str:
        """The job's ComputeDomain (the guide's ``training-job-cd``)."""
        return f"{self.name}-cd"

    @property
    def channel_template(self) -> str:
        """The ComputeDomain's channel ResourceClaimTemplate, created by the driver's
        controller (the guide's ``training-job-imex-channel``)."""
        return f"{self.name}-imex-channel"

    @property
    def rdma_template(self) -> str:
        """The shared RDMA ResourceClaimTemplate (the guide's ``training-job-rdma``)."""
        return f"{self.name}-rdma"


def domain_of(spec: JobSpec, rank: int) -> Domain:
    """The domain rank ``rank`` runs in (ranks fill the domains in order).

    Raises:
        JobSpecError: the job has no such rank.
    """
    if rank >= 0:
        first = 0
        for domain in spec.domains:
            if rank < first + domain.node_count:
                return domain
            first += domain.node_count
    raise JobSpecError(f"job {spec.name} has ranks 0..{spec.world_size - 1}, not {rank}")


def validate(spec: JobSpec) -> list[str]:
    """Every reason the API server (or the guide) would refuse the job; empty when it is fine."""
    problems: list[str] = []
    if not _DNS_LABEL.match(spec.name) or len(spec.name) > _NAME_MAX:
        problems.append(
            f"job name {spec.name!r} must be a DNS label (lower-case letters, digits, '-') "
            f"of at most {_NAME_MAX} characters"
        )
    if not _DNS_LABEL.match(spec.namespace):
        problems.append(f"namespace {spec.namespace!r} is not a DNS label")
    if not spec.domains:
        problems.append("no domain allocated: give at least one cluster UUID and node count")
    seen: set[str] = set()
    for i, domain in enumerate(spec.domains):
        uuid = domain.cluster_uuid
        if not uuid or len(uuid) > 63 or not _LABEL_VALUE.match(uuid):
            problems.append(f"domain {i}: cluster UUID {uuid!r} is not a valid label value")
        if uuid in seen:
            problems.append(f"domain {i}: cluster UUID {uuid} is allocated twice")
        seen.add(uuid)
        if domain.node_count < 1:
            problems.append(f"domain {i} ({uuid}): node count {domain.node_count} is below 1")
    if not spec.image:
        problems.append("no image")
    if spec.gpus < 0:
        problems.append(f"GPUs per pod {spec.gpus} is negative")
    if spec.rdma and spec.rdma_nics < 1:
        problems.append(f"RDMA NICs per pod {spec.rdma_nics} is below 1")
    if spec.priority_class and not _DNS_SUBDOMAIN.match(spec.priority_class):
        problems.append(f"priority class {spec.priority_class!r} is not a valid name")
    return problems


def checked(spec: JobSpec) -> JobSpec:
    """``spec`` itself when ``validate`` finds nothing.

    Raises:
        JobSpecError: naming every problem found.
    """
    problems = validate(spec)
    if problems:
        raise JobSpecError(f"job {spec.name!r}: " + "; ".join(problems))
    return spec


def to_record(spec: JobSpec) -> str:
    """The spec as the compact JSON record kept on the job's ComputeDomain."""
    doc: dict[str, Any] = {
        "version": RECORD_VERSION,
        **{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)},
    }
    doc["domains"] = [
        {"clusterUUID": d.cluster_uuid, "nodeCount": d.node_count} for d in spec.domains
    ]
    doc["command"] = list(spec.command)
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def from_record(text: str) -> JobSpec:
    """The spec a ``to_record`` record holds.

    Raises:
        JobSpecError: the record is not one this version wrote (or not a valid job).
    """
    try:
        doc = json.loads(text)
        if doc.pop("version") != RECORD_VERSION:
            raise ValueError("unknown record version")
        domains = tuple(
            Domain(cluster_uuid=str(d["clusterUUID"]), node_count=int(d["nodeCount"]))
            for d in doc.pop("domains")
        )
        doc["command"] = tuple(str(c) for c in doc["command"])
        spec = JobSpec(domains=domains, **doc)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise JobSpecError(f"unreadable job record: {err}: {text[:200]!r}") from err
    return checked(spec)
