"""The resident IMEX agents' pods, as a shared registry's reader must check them.

A node's entry in a clique's shared registry (``api.sharedimex``) is written by the node's
resident agent, and its ``status`` is only as fresh as that agent: an agent killed with
``kill -9`` takes its shared IMEX with it (the IMEX is its child) but leaves its entry Ready
until its restarted process registers again. The kubelet, though, marks the agent's pod
NotReady as soon as its container dies. So a registry entry counts as Ready only while its
node's agent pod (label ``app.kubernetes.io/component=imex-agent``, driver namespace) is Ready
*and has the entry's IP* (the IP the agent registered with: the same pod, the same IMEX slot).
An agent pod restarted in place keeps its IP, so its entry is counted again, on the same index,
once its pod is Ready; a new pod (new IP) registers anew.

The controller (``controller.agentpods``) and the kubelet plugin (``plugin.registry``) both
judge by :func:`serving`; this module only summarises pods and words the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Final

COMPONENT_LABEL: Final = "app.kubernetes.io/component"
COMPONENT: Final = "imex-agent"
"""The chart labels every resident agent pod ``app.kubernetes.io/component=imex-agent``."""
LABELS: Final = {COMPONENT_LABEL: COMPONENT}
"""The label selector of the resident agents' pods."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class AgentPod:
    """What a registry reader needs to know about one agent pod."""

    name: str
    node_name: str
    """``spec.nodeName``; empty while unscheduled."""
    ip: str
    """``status.podIP``: the IP its agent registers with."""
    ready: bool
    """Phase Running and condition Ready True (the kubelet withdraws it when the agent dies)."""
    restarts: int = 0
    """The highest ``restartCount`` of its containers."""

    @classmethod
    def from_pod(cls, pod: Any) -> AgentPod:
        """Summarise a lightkube Pod (typed)."""
        meta, spec, status = pod.metadata, pod.spec, pod.status
        conditions = (status.conditions or []) if status is not None else []
        containers = (status.containerStatuses or []) if status is not None else []
        return cls(
            name=(meta.name or "") if meta is not None else "",
            node_name=(spec.nodeName or "") if spec is not None else "",
            ip=(status.podIP or "") if status is not None else "",
            ready=status is not None
            and status.phase == "Running"
            and any(c.type == "Ready" and c.status == "True" for c in conditions),
            restarts=max((c.restartCount or 0 for c in containers), default=0),
        )


def is_agent(pod: Any) -> bool:
    """Whether a lightkube Pod carries the agents' label."""
    labels = (pod.metadata.labels if pod.metadata is not None else None) or {}
    return bool(labels.get(COMPONENT_LABEL) == COMPONENT)


def serving(pods: Iterable[AgentPod], *, node: str, ip: str) -> bool:
    """Whether ``node``'s registry entry with IP ``ip`` has a Ready agent pod behind it."""
    return any(p.ready and p.node_name == node and p.ip == ip for p in pods)


def not_serving_text(pods: Iterable[AgentPod], *, node: str, ip: str) -> str:
    """Why the entry (``node``, ``ip``) is not backed by a Ready agent pod (docs/status.md)."""
    mine = [p for p in pods if p.node_name == node]
    pod = next((p for p in mine if p.ip == ip), None)
    if pod is None:
        if mine:
            return (
                f"its IMEX agent pod {mine[0].name} does not have the registry entry's IP "
                f"{ip or '(none)'} (a new agent has not registered yet)"
            )
        return "its IMEX agent pod is gone (its shared IMEX went with it)"
    if pod.restarts:
        return f"its IMEX agent is not Ready (restart {pod.restarts}; its shared IMEX went with it)"
    return "its IMEX agent is not Ready (its shared IMEX goes with it)"
