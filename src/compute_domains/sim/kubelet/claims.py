"""Which ResourceClaims a pod's DRA preparation needs, checked as the 1.34 kubelet checks them.

A pod claim names its ResourceClaim directly, or through a template: then the name is the one
the resource-claim controller published in the pod's ``status.resourceClaimStatuses`` (not
there yet: "ResourceClaim not created yet"; there but empty: the pod needs no claim). Each
claim is fetched and must be owned by the pod (template claims only), reserved for it and
allocated; its drivers are those of its allocation's results, each non-empty and registered.
Every refusal is ``PrepareError`` with the kubelet's message, which the pod worker retries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.infra import kube
from compute_domains.sim.kubelet import errors


@dataclasses.dataclass(frozen=True, slots=True)
class PodClaim:
    """One claim of a pod, checked."""

    pod_claim: str
    """The claim's name in the pod spec (what containers' ``resources.claims`` refer to)."""
    claim: ResourceClaim
    drivers: list[str]
    """Drivers of the claim's allocated devices, sorted."""


def _claim_names(pod: Pod) -> list[tuple[str, str]]:
    """(pod claim name, ResourceClaim name) pairs, as the kubelet resolves them."""
    meta, spec = pod.metadata, pod.spec
    assert meta is not None and spec is not None
    statuses = {
        s.name: s.resourceClaimName
        for s in (pod.status.resourceClaimStatuses or [] if pod.status else [])
    }
    out = []
    for rc in spec.resourceClaims or []:
        if rc.resourceClaimName:
            out.append((rc.name, rc.resourceClaimName))
        elif rc.resourceClaimTemplateName:
            if rc.name not in statuses:
                raise errors.PrepareError(
                    f'pod "{meta.namespace}/{meta.name}": ResourceClaim not created yet'
                )
            if statuses[rc.name]:
                out.append((rc.name, str(statuses[rc.name])))
        else:
            raise errors.PrepareError(
                f'spec.resourceClaim "{rc.name}": none of the supported fields are set'
            )
    return out


async def _checked_claim(
    client: AsyncClient, pod: Pod, claim_name: str, template: bool
) -> ResourceClaim:
    meta = pod.metadata
    assert meta is not None
    try:
        with kube.translated(f"fetch ResourceClaim {claim_name}"):
            claim = await client.get(ResourceClaim, claim_name, namespace=meta.namespace)
    except kube.KubeError as err:
        raise errors.PrepareError(
            f"fetch ResourceClaim {claim_name}: {kube.server_message(err)}"
        ) from err
    cm = claim.metadata
    assert cm is not None
    if template and not any(o.controller and o.uid == meta.uid for o in cm.ownerReferences or []):
        raise errors.PrepareError(
            f"ResourceClaim {meta.namespace}/{claim_name} was not "
            f"created for pod {meta.namespace}/{meta.name} (pod is not "
            "owner)"
        )
    status = claim.status
    if status is None or not any(r.uid == meta.uid for r in status.reservedFor or []):
        raise errors.PrepareError(
            f"pod {meta.name} ({meta.uid}) is not allowed to use "
            f"ResourceClaim {claim_name} ({cm.uid})"
        )
    if status.allocation is None:
        raise errors.PrepareError(f"ResourceClaim {claim_name}: not allocated")
    return claim


async def resolve(
    client: AsyncClient, pod: Pod, check_driver: Callable[[str], object]
) -> list[PodClaim]:
    """The pod's claims in spec order, each checked; ``check_driver`` raises ``PrepareError``
    for a driver without a registered plugin.

    Raises:
        errors.PrepareError: a claim is not there yet, not the pod's, not allocated, or one of
            its drivers is nameless or not registered.
    """
    spec = pod.spec
    assert spec is not None
    templates = {rc.name for rc in spec.resourceClaims or [] if rc.resourceClaimTemplateName}
    out = []
    for pod_claim, claim_name in _claim_names(pod):
        claim = await _checked_claim(client, pod, claim_name, pod_claim in templates)
        results = claim.status.allocation.devices.results  # type: ignore[union-attr]
        drivers = sorted({r.driver for r in results or []})
        for d in drivers:
            if not d:
                raise errors.PrepareError("DRA driver name is empty")
            check_driver(d)
        out.append(PodClaim(pod_claim, claim, drivers))
    return out
