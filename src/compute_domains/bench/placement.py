"""Where a benchmark's workload pods go: one rack, pinned per rack, or several pods per node (pure).

The seed example fits one rack: one Deployment whose pods share an NVLink clique by
``podAffinity``, which the scheduler resolves (the first pod picks the clique). Larger domains are
pinned per rack the way the seeds pin their training pods (002 §15.5: ``nodeSelector`` on
``nvidia.com/gpu.clusteruuid``): one Deployment per rack, as many pods as the rack gives nodes,
so the scheduler never has to guess which clique a group belongs in. NVIDIA's issue #816 shape
(256 pods on 64 nodes, 4 per node, one GPU each, all in one CD) needs the pods packed per node:
one Deployment per node, pinned by hostname, so exactly ``nodes`` nodes get daemons.

The ``Workload`` says what the pods ask for besides their GPUs. ``claims`` is the benchmark of
the driver (a ComputeDomain, each pod's channel claim, the clique affinity); ``affinity`` and
``plain`` are the same pods without the domain, to measure what the cluster costs without it
(issue 26 point 6's floor, issue 28 point 4's scheduler share): ``affinity`` keeps the podAffinity
and node selectors, ``plain`` keeps only the node selectors (the GPU limits already put one pod
on each node).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any

from lightkube.resources.apps_v1 import Deployment

from compute_domains.api import names

HOSTNAME_LABEL = "kubernetes.io/hostname"
CLUSTER_UUID_LABEL = "nvidia.com/gpu.clusteruuid"


@dataclasses.dataclass(frozen=True, slots=True)
class GpuNode:
    """A node the workload may use: its name, cluster UUID, clique and GPU count."""

    name: str
    cluster_uuid: str
    clique: str
    gpus: int


@dataclasses.dataclass(frozen=True, slots=True)
class Group:
    """One Deployment of the workload: its name suffix, replicas, selector and GPUs per pod."""

    suffix: str
    replicas: int
    node_selector: dict[str, str]
    gpus_per_pod: int
    clique_affinity: bool = False
    """Pods of the group share a clique by ``podAffinity`` (the seed example's form)."""


class Workload(enum.StrEnum):
    """What the workload's pods ask for besides their GPUs (``--workload``)."""

    CLAIMS = "claims"
    """A ComputeDomain, a channel claim in every pod, podAffinity on the clique (one rack)."""
    AFFINITY = "affinity"
    """The same pods and placement with podAffinity and node selectors, no CD, no claim."""
    PLAIN = "plain"
    """The same pods with node selectors only: no CD, no claim, no podAffinity."""

    @property
    def has_domain(self) -> bool:
        """Whether the run creates a ComputeDomain (and so has daemons, cliques, a CD status)."""
        return self is Workload.CLAIMS


class PlacementError(ValueError):
    """The cluster cannot hold the asked workload; the message says what is missing."""


def plan(pods: int, pods_per_node: int, nodes: Sequence[GpuNode]) -> list[Group]:
    """The Deployments for ``pods`` pods, ``pods_per_node`` on each node, on ``nodes``.

    Raises:
        PlacementError: ``pods`` is not a multiple of ``pods_per_node``, a node's GPUs do not
            split into ``pods_per_node`` equal parts, or there are not enough fabric nodes.
    """
    if pods < 1 or pods_per_node < 1 or pods % pods_per_node:
        raise PlacementError(
            f"{pods} pods cannot be spread {pods_per_node} per node (need a whole multiple)"
        )
    want = pods // pods_per_node
    racks: dict[str, list[GpuNode]] = {}
    for node in sorted(nodes, key=lambda x: x.name):
        if node.clique:  # fabric nodes only: a domain of non-fabric nodes is not MNNVL
            racks.setdefault(node.clique, []).append(node)
    have = sum(len(r) for r in racks.values())
    if have < want:
        raise PlacementError(f"{pods} pods need {want} fabric nodes; the cluster has {have}")
    gpus = min(n.gpus for r in racks.values() for n in r)
    if gpus % pods_per_node:
        raise PlacementError(f"{gpus} GPUs per node do not split into {pods_per_node} pods")
    per_pod = gpus // pods_per_node
    if pods_per_node == 1 and want <= max(len(r) for r in racks.values()):
        # The seed example's shape: the scheduler picks the clique.
        return [Group("", want, {}, per_pod, clique_affinity=True)]
    groups: list[Group] = []
    left = want
    for clique in sorted(racks):
        if not left:
            break
        members = racks[clique][:left]
        left -= len(members)
        if pods_per_node == 1:
            selector = {CLUSTER_UUID_LABEL: members[0].cluster_uuid}
            groups.append(Group(f"r{len(groups)}", len(members), selector, per_pod))
            continue
        for node in members:
            selector = {HOSTNAME_LABEL: node.name}
            groups.append(Group(node.name, pods_per_node, selector, per_pod))
    return groups


def manifests(
    n: int, ns: str, name: str, groups: Sequence[Group], workload: Workload = Workload.CLAIMS
) -> tuple[dict[str, Any] | None, list[Deployment]]:
    """The ComputeDomain ``name`` (None unless ``workload`` has one) and the Deployments of its
    ``n``-pod workload (``groups``).

    Every pod carries the label ``bench: <name>``; a single group keeps the name ``name`` (the
    seed example's form), others are ``<name>-<suffix>``. The pods of every workload run the
    same image and command with the same GPU limits and node selectors; ``affinity`` leaves out
    the claim, ``plain`` the claim and the podAffinity.
    """
    cd = None
    if workload.has_domain:
        cd = {
            "apiVersion": names.API_VERSION,
            "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-rct"}}},
        }
    if sum(g.replicas for g in groups) != n:
        raise ValueError(f"groups hold {sum(g.replicas for g in groups)} pods, not {n}")
    return cd, [_deployment(ns, name, group, workload) for group in groups]


def _deployment(ns: str, name: str, group: Group, workload: Workload) -> Deployment:
    dep_name = f"{name}-{group.suffix}" if group.suffix else name
    container: dict[str, Any] = {
        "name": "ctr",
        "image": "ubuntu:22.04",
        "command": ["mnnvl-workload"],
        "resources": {"limits": {"nvidia.com/gpu": group.gpus_per_pod}},
    }
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 1, "containers": [container]}
    if workload.has_domain:
        spec["resourceClaims"] = [{"name": "cd", "resourceClaimTemplateName": f"{name}-rct"}]
        container["resources"]["claims"] = [{"name": "cd"}]
    if group.node_selector:
        spec["nodeSelector"] = dict(group.node_selector)
    if group.clique_affinity and workload is not Workload.PLAIN:
        spec["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"bench": name}},
                        "topologyKey": names.GPU_CLIQUE_LABEL,
                    }
                ]
            }
        }
    labels = {"bench": name, "bench-group": dep_name}
    dep = Deployment.from_dict(
        {
            "metadata": {"name": dep_name, "namespace": ns, "labels": {"bench": name}},
            "spec": {
                "replicas": group.replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": spec},
            },
        }
    )
    assert isinstance(dep, Deployment)
    return dep


def clique_of(labels: dict[str, str]) -> str:
    """A node's clique label (empty when it has none)."""
    return labels.get(names.GPU_CLIQUE_LABEL, "")
