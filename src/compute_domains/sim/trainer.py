"""The training framework of the seeds' 64+8 scenario: one pod per rank, replaced in its rack.

The deployment guide (shared/seeds/002 §15.5-15.6) assumes a framework that creates one training
pod per rank, each pinned to its rack's NVLink domain by ``nvidia.com/gpu.clusteruuid``, and
that "creates a replacement pod pinned to the same domain" when a rank is lost. ``Trainer`` plays
that framework for ``cdctl demo --scenario two-domain-64plus8`` and its e2e test. It is a client
of the API server like any framework, not part of the driver or of the simulated cluster: it runs
as a task of the process that starts it (docs/scenario-64plus8.md says why).

Invariants:
- Each rank ``(rack, r)``, ``r < ranks_per_rack``, has at most one live pod, named
  ``train-<rack>-<rr>`` and then ``train-<rack>-<rr>-r<generation>`` for each replacement.
- A pod is *lost* when it ended (``Failed``/``Succeeded``), has a ``deletionTimestamp`` (evicted,
  preempted, drained) or sits on a node whose ``Ready`` condition is not ``True``. A lost pod is
  force-deleted (grace period 0) before its replacement is created: on a dead node no kubelet
  will ever confirm a graceful deletion, and until the object is gone it keeps its anti-affinity
  hold and the rank's identity.
- The replacement carries the same rack pin as the rank's first pod, whatever node the lost pod
  was on: MNNVL is intra-rack, so a rank never moves to the other domain.
- Pods and nodes are followed by watch (``infra.kube.watch``); every change runs one reconcile
  over the in-memory state. The framework's own writes enter that state at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any, Final, cast

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.infra import kube
from compute_domains.infra.kube import watch

logger = logging.getLogger(__name__)

CLUSTER_UUID_LABEL: Final = "nvidia.com/gpu.clusteruuid"
"""Node label (GPU Feature Discovery) naming a node's NVLink domain; the guide pins by it."""
RACK_LABEL: Final = "rack"
RANK_LABEL: Final = "rank"
GENERATION_LABEL: Final = "generation"


@dataclasses.dataclass(frozen=True, slots=True)
class Rack:
    """One NVLink domain the job runs in."""

    name: str
    """Short name used in pod names and the ``rack`` label (``a``, ``b``)."""
    cluster_uuid: str
    """The rack's ``nvidia.com/gpu.clusteruuid`` node label value."""


@dataclasses.dataclass(frozen=True, slots=True)
class TrainerSettings:
    """What the framework runs: the guide's §15.5 pod, ``ranks_per_rack`` of it per rack."""

    racks: tuple[Rack, ...]
    channel_template: str
    """The ComputeDomain's ``spec.channel.resourceClaimTemplate.name``."""
    namespace: str = "default"
    job: str = "training-job-2domain"
    """Value of every pod's ``job`` label (the anti-affinity's selector)."""
    ranks_per_rack: int = 16
    priority_class: str = "training-high-priority"
    image: str = "nvcr.io/nvidia/pytorch:25.04-py3"
    command: tuple[str, ...] = ("mnnvl-workload",)
    """The trainer's stand-in, the simulator's MNNVL program: logs its IMEX channel and the
    IMEX domain its node's daemon sees, then runs until stopped (the simulator runs a
    container's command; an image has no entrypoint of its own there)."""
    gpus: int = 4
    rdma_template: str = ""
    """The shared RDMA ResourceClaimTemplate every rank's pod also claims (§15.5's
    ``training-job-rdma``, DRANET's NICs); empty: no RDMA claim."""


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """Something the framework did (``created`` or ``deleted``), for timelines."""

    at: float
    """``time.monotonic()`` when the API call returned."""
    kind: str
    pod: str
    rack: str
    rank: int
    reason: str = ""


def pod_name(rack: str, rank: int, generation: int) -> str:
    """``train-a-05`` for the first pod of a rank, ``train-a-05-r2`` for its second replacement."""
    base = f"train-{rack}-{rank:02d}"
    return base if generation == 0 else f"{base}-r{generation}"


def rank_pod(s: TrainerSettings, rack: Rack, rank: int, generation: int) -> Pod:
    """The guide's training pod for one rank (its §15.5 spec; the DRANET claim when
    ``rdma_template`` is set). ``RANK`` counts in domain order over the racks (the guide's
    rank order), ``WORLD_SIZE`` is every rack's ranks, ``NCCL_MNNVL_ENABLE=2`` as §15.5."""
    claims = [{"name": "compute-domain-channel", "resourceClaimTemplateName": s.channel_template}]
    if s.rdma_template:
        claims.append({"name": "rdma-nics", "resourceClaimTemplateName": s.rdma_template})
    first = next(i for i, r in enumerate(s.racks) if r.name == rack.name) * s.ranks_per_rack
    labels = {
        "job": s.job,
        RACK_LABEL: rack.name,
        RANK_LABEL: str(rank),
        GENERATION_LABEL: str(generation),
    }
    spec: dict[str, Any] = {
        "priorityClassName": s.priority_class,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": CLUSTER_UUID_LABEL,
                                    "operator": "In",
                                    "values": [rack.cluster_uuid],
                                }
                            ]
                        }
                    ]
                }
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [
                                {"key": "job", "operator": "In", "values": [s.job]}
                            ]
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            },
        },
        "containers": [
            {
                "name": "trainer",
                "image": s.image,
                "command": list(s.command),
                "env": [
                    {"name": "RANK", "value": str(first + rank)},
                    {"name": "WORLD_SIZE", "value": str(len(s.racks) * s.ranks_per_rack)},
                    {"name": "NCCL_MNNVL_ENABLE", "value": "2"},
                ],
                "resources": {
                    "limits": {"nvidia.com/gpu": s.gpus},
                    "claims": [{"name": c["name"]} for c in claims],
                },
            }
        ],
        "resourceClaims": claims,
    }
    doc = {
        "metadata": {
            "name": pod_name(rack.name, rank, generation),
            "namespace": s.namespace,
            "labels": labels,
        },
        "spec": spec,
    }
    return cast(Pod, Pod.from_dict(doc))


def node_ready(node: Node) -> bool:
    """Whether the node's ``Ready`` condition is ``True``."""
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def lost_reason(pod: Pod, ready_nodes: dict[str, bool]) -> str:
    """Why the rank's pod is lost ("" while it is not)."""
    phase = pod.status.phase if pod.status else None
    if phase in ("Failed", "Succeeded"):
        return f"pod {phase}"
    if pod.metadata is not None and pod.metadata.deletionTimestamp is not None:
        return "pod deleted (evicted, preempted or drained)"
    node = pod.spec.nodeName if pod.spec else None
    if node and not ready_nodes.get(node, True):
        return f"node {node} NotReady"
    return ""


def _labels(pod: Pod) -> dict[str, str]:
    return dict((pod.metadata.labels if pod.metadata else None) or {})


def _name(pod: Pod) -> str:
    return str(pod.metadata.name if pod.metadata else "")


def _rank_of(pod: Pod) -> tuple[str, int] | None:
    """``(rack, rank)`` from the pod's labels (None for a pod without them)."""
    labels = _labels(pod)
    try:
        return labels[RACK_LABEL], int(labels[RANK_LABEL])
    except (KeyError, ValueError):
        return None


class Trainer:
    """Keeps every rank's pod (module docstring); ``run()`` until cancelled."""

    def __init__(
        self,
        client: AsyncClient,
        settings: TrainerSettings,
        on_action: Callable[[Action], None] | None = None,
    ) -> None:
        self._client, self._s = client, settings
        self._on_action = on_action
        self._pods: dict[str, Pod] = {}
        self._ready_nodes: dict[str, bool] = {}
        self._next_generation: dict[tuple[str, int], int] = {}
        self._synced: set[str] = set()
        self._dirty = asyncio.Event()

    async def run(self) -> None:
        """Watch pods and nodes; reconcile after every change."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._follow_pods(), name="trainer:pods")
            tg.create_task(self._follow_nodes(), name="trainer:nodes")
            tg.create_task(self._reconcile_loop(), name="trainer:reconcile")

    async def _follow_pods(self) -> None:
        s = self._s
        async for item in watch.stream(
            self._client, Pod, name="trainer-pods", namespace=s.namespace, labels={"job": s.job}
        ):
            if isinstance(item, watch.Listed):
                self._pods = {p.metadata.name: p for p in item.objects}
                self._synced.add("pods")
                for p in item.objects:
                    self._seen(p)
            elif item.type == "DELETED":
                self._pods.pop(item.obj.metadata.name, None)
            else:
                self._pods[item.obj.metadata.name] = item.obj
                self._seen(item.obj)
            self._dirty.set()

    async def _follow_nodes(self) -> None:
        async for item in watch.stream(self._client, Node, name="trainer-nodes"):
            if isinstance(item, watch.Listed):
                self._ready_nodes = {n.metadata.name: node_ready(n) for n in item.objects}
                self._synced.add("nodes")
            elif item.type == "DELETED":
                self._ready_nodes.pop(item.obj.metadata.name, None)
            else:
                self._ready_nodes[item.obj.metadata.name] = node_ready(item.obj)
            self._dirty.set()

    def _seen(self, pod: Pod) -> None:
        key = _rank_of(pod)
        try:
            generation = int(_labels(pod)[GENERATION_LABEL])
        except (KeyError, ValueError):
            return
        if key is None:
            return
        self._next_generation[key] = max(self._next_generation.get(key, 0), generation + 1)

    async def _reconcile_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            if self._synced != {"pods", "nodes"}:
                continue
            try:
                await self.reconcile()
            except kube.KubeError as err:
                # The next change (or our own write's event) runs the pass again.
                logger.warning("trainer: reconcile failed: %s", err)
                self._dirty.set()
                await asyncio.sleep(1)  # back off before retrying a failing API call

    async def reconcile(self) -> None:
        """One pass: force-delete lost pods, create every missing rank's pod."""
        for rack in self._s.racks:
            for rank in range(self._s.ranks_per_rack):
                await self._keep_rank(rack, rank)

    async def _keep_rank(self, rack: Rack, rank: int) -> None:
        mine = [p for p in self._pods.values() if _rank_of(p) == (rack.name, rank)]
        live = 0
        for pod in mine:
            why = lost_reason(pod, self._ready_nodes)
            if not why:
                live += 1
                continue
            name = _name(pod)
            try:
                with kube.translated(f"force-delete pod {name}"):
                    await self._client.delete(
                        Pod, name, namespace=self._s.namespace, grace_period=0
                    )
            except kube.NotFound:
                pass  # gone already: what the deletion was for
            self._pods.pop(name, None)
            self._report("deleted", name, rack, rank, why)
        if live:
            return
        key = (rack.name, rank)
        generation = self._next_generation.get(key, 0)
        pod = rank_pod(self._s, rack, rank, generation)
        with kube.translated(f"create pod {_name(pod)}"):
            created = await self._client.create(pod)
        self._pods[_name(created)] = created
        self._next_generation[key] = generation + 1
        self._report("created", _name(created), rack, rank)

    def _report(self, kind: str, pod: str, rack: Rack, rank: int, reason: str = "") -> None:
        logger.info("trainer: %s pod %s (rack %s rank %d) %s", kind, pod, rack.name, rank, reason)
        if self._on_action is not None:
            self._on_action(Action(time.monotonic(), kind, pod, rack.name, rank, reason))
