"""Workload claims of a ComputeDomain, read from ResourceClaims (pure).

A *workload claim* of CD ``X`` is a ResourceClaim whose opaque config for our driver is a
``ComputeDomainChannelConfig`` with ``domainID`` = X's UID: every claim made from X's workload
ResourceClaimTemplate, and any claim a user wrote by hand with that config. Daemon claims
(``ComputeDomainDaemonConfig``) are not workload claims.

A workload claim *holds* a node once it is allocated there (the scheduler picked the node; the
pods it is reserved for run there, or wait there for their prepare). The node is read from the
allocation's node selector (``matchFields metadata.name``, what the scheduler writes for a
node-local ResourceSlice) or, failing that, from the pool of our driver's allocated device
(our pools are named after their node). An unallocated claim holds no node: nobody can know yet
where it will run.

Reading is lenient (lightkube objects or plain dicts, unknown shapes give "no domain"): a claim
of another driver, or one whose config is broken, is simply not ours to count; the kubelet
plugin is the one that rejects broken configs, loudly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from compute_domains.api import names
from compute_domains.controller import informer


def _get(obj: Any, key: str) -> Any:
    """Field ``key`` of a lightkube model or a dict (None when absent)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def domain_uids(claim: Any) -> Iterable[str]:
    """UIDs of the ComputeDomains ``claim`` is a workload claim of (an indexer)."""
    devices = _get(_get(claim, "spec"), "devices")
    found = []
    for config in _get(devices, "config") or []:
        opaque = _get(config, "opaque")
        if _get(opaque, "driver") != names.DRIVER_NAME:
            continue
        params = _get(opaque, "parameters")
        if not isinstance(params, dict) or params.get("kind") != names.CHANNEL_CONFIG_KIND:
            continue
        uid = params.get("domainID")
        if isinstance(uid, str) and uid and uid not in found:
            found.append(uid)
    return tuple(found)


def allocated_node(claim: Any) -> str:
    """The node ``claim`` is allocated to ("" while unallocated or not node-local)."""
    allocation = _get(_get(claim, "status"), "allocation")
    if allocation is None:
        return ""
    selector = _get(allocation, "nodeSelector")
    for term in _get(selector, "nodeSelectorTerms") or []:
        for field in _get(term, "matchFields") or []:
            values = _get(field, "values") or []
            if _get(field, "key") == "metadata.name" and _get(field, "operator") == "In" and values:
                return str(values[0])
    for result in _get(_get(allocation, "devices"), "results") or []:
        if _get(result, "driver") == names.DRIVER_NAME and _get(result, "pool"):
            return str(_get(result, "pool"))
    return ""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadClaim:
    """What the status and the deletion need to know about one workload claim."""

    namespace: str
    name: str
    node: str
    """The node it is allocated to; "" while unallocated."""
    pods: tuple[str, ...] = ()
    """Names of the pods it is reserved for (``status.reservedFor``), in its namespace."""
    owner: str = ""
    """The pod that owns it (a claim made from a template: its controller owner reference)."""

    @classmethod
    def from_claim(cls, claim: Any) -> WorkloadClaim:
        """Summarise a lightkube ResourceClaim."""
        meta = _get(claim, "metadata")
        reserved = _get(_get(claim, "status"), "reservedFor") or []
        pods = tuple(
            str(_get(r, "name"))
            for r in reserved
            if _get(r, "resource") == "pods" and _get(r, "name")
        )
        owner = next(
            (
                str(_get(ref, "name"))
                for ref in _get(meta, "ownerReferences") or []
                if _get(ref, "kind") == "Pod" and _get(ref, "controller") and _get(ref, "name")
            ),
            "",
        )
        return cls(
            namespace=str(_get(meta, "namespace") or ""),
            name=str(_get(meta, "name") or ""),
            node=allocated_node(claim),
            pods=pods,
            owner=owner,
        )

    @property
    def placed(self) -> bool:
        """Whether the claim is allocated to a node (held there, or waited for)."""
        return bool(self.node)


class Summaries:
    """``WorkloadClaim.from_claim`` of cached claims, each read once per cached version
    (``informer.PerObject``): a status pass summarises every workload claim of its CD
    (thousands at scale)."""

    def __init__(self) -> None:
        self._known: informer.PerObject[WorkloadClaim] = informer.PerObject(
            WorkloadClaim.from_claim
        )

    def of(self, claim: Any) -> WorkloadClaim:
        """The summary of ``claim`` (computed when this object was not seen before)."""
        return self._known.of(_key(claim), claim)

    def forget(self, claim: Any) -> None:
        """Drop what is known of ``claim`` (it was deleted)."""
        self._known.forget(_key(claim))


def _key(claim: Any) -> tuple[str, str]:
    meta = _get(claim, "metadata")
    return (str(_get(meta, "namespace") or ""), str(_get(meta, "name") or ""))


def using_pods(claims: Iterable[WorkloadClaim]) -> list[str]:
    """``namespace/pod`` of every pod that holds one of ``claims`` (else the claim), sorted."""
    out: set[str] = set()
    for claim in claims:
        if not claim.placed:
            continue
        if claim.pods:
            out.update(f"{claim.namespace}/{pod}" for pod in claim.pods)
        else:
            out.add(f"{claim.namespace}/{claim.name} (claim)")
    return sorted(out)
