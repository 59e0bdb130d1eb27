"""Where each rank of a job stands, derived from its pods and their nodes (pure functions).

A rank is *lost* when it has no live pod: none at all (deleted), or only pods that ended
(``Failed``/``Succeeded``), are being deleted (evicted, preempted, drained) or sit on a node
whose ``Ready`` condition is not ``True`` (the guide's §15.6 failure: "node-5 NotReady → the
training pod is evicted"). A lost rank is what the job controller replaces, in its own domain.

Invariants:
- A pod counts for the rank in its ``compute-domains/rank`` label; pods without a readable
  rank label are ignored (they are not the job's).
- ``next_generation`` is one more than the highest generation of the rank's pods in the
  listing (1 when it lists none: the launch made generation 0), so a replacement's name is
  never one still held by a terminating pod.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from lightkube.resources.core_v1 import Node, Pod

from compute_domains.jobs import plan


@dataclasses.dataclass(frozen=True, slots=True)
class RankState:
    """One rank: its live pod (if any) and the pods it lost."""

    rank: int
    cluster_uuid: str
    """The domain the rank is pinned to."""
    live: Pod | None
    """The pod serving the rank now (the newest, if several are alive)."""
    lost: tuple[tuple[Pod, str], ...]
    """Pods of the rank that no longer serve it, each with the reason."""
    next_generation: int
    pods: tuple[Pod, ...] = ()
    """Every listed pod of the rank, oldest generation first."""

    @property
    def is_lost(self) -> bool:
        """Whether the rank needs a replacement (no live pod)."""
        return self.live is None


def node_ready(node: Node) -> bool:
    """Whether the node's ``Ready`` condition is ``True``."""
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def lost_reason(pod: Pod, ready_nodes: Mapping[str, bool]) -> str:
    """Why ``pod`` no longer serves its rank; "" while it does (or may still: Pending)."""
    phase = pod.status.phase if pod.status else None
    if phase in ("Failed", "Succeeded"):
        return f"pod {phase}"
    if pod.metadata is not None and pod.metadata.deletionTimestamp is not None:
        return "pod being deleted (evicted, preempted or drained)"
    node = pod.spec.nodeName if pod.spec else None
    if node and not ready_nodes.get(node, False):
        return f"node {node} not Ready"
    return ""


def _label(pod: Pod, key: str) -> int | None:
    labels = (pod.metadata.labels if pod.metadata else None) or {}
    try:
        return int(labels[key])
    except (KeyError, ValueError):
        return None


def generation_of(pod: Pod) -> int:
    """The pod's generation label (0 when absent)."""
    return _label(pod, plan.GENERATION_LABEL) or 0


def rank_states(
    domains: Iterable[str], pods: Iterable[Pod], nodes: Iterable[Node]
) -> list[RankState]:
    """One state per rank; ``domains`` is each rank's cluster UUID, in rank order."""
    ready = {str(n.metadata.name): node_ready(n) for n in nodes if n.metadata}
    by_rank: dict[int, list[Pod]] = {}
    for pod in pods:
        rank = _label(pod, plan.RANK_LABEL)
        if rank is not None:
            by_rank.setdefault(rank, []).append(pod)
    states = []
    for rank, uuid in enumerate(domains):
        mine = sorted(by_rank.get(rank, []), key=generation_of)
        live = [p for p in mine if not lost_reason(p, ready)]
        states.append(
            RankState(
                rank=rank,
                cluster_uuid=uuid,
                live=live[-1] if live else None,
                lost=tuple((p, r) for p in mine if (r := lost_reason(p, ready))),
                pods=tuple(mine),
                # A rank whose pods are all gone was launched with generation 0 already.
                next_generation=generation_of(mine[-1]) + 1 if mine else 1,
            )
        )
    return states
