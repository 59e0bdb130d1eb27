"""Pure builders of the ``cdctl status`` and ``cdctl topology`` views from API objects.

Inputs are the objects as plain dicts (what ``to_dict()`` gives); outputs are JSON-ready dicts,
so the same data backs ``-o json`` and the tables. Nothing here talks to the API.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from compute_domains.api import names, nodemark

Obj = Mapping[str, Any]


def _meta(o: Obj) -> Mapping[str, Any]:
    return o.get("metadata") or {}


def _ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _pod_reason(pod: Obj) -> str:
    """Why a pod is not Ready, in the kubelet's own words."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason', '')}: {waiting.get('message') or ''}".strip(": ")
        if not cs.get("ready"):
            return "container not ready (readiness check failing)"
    return status.get("phase") or "Pending"


def _scheduler_says(pod: Obj) -> str:
    """The message of a pod's ``PodScheduled=False`` condition (why no node fits)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return str(c.get("message") or c.get("reason") or "Unschedulable")
    return "not tried by the scheduler yet"


def _pending(pod: Obj) -> bool:
    """Not placed on a node and not being deleted."""
    return not (pod.get("spec") or {}).get("nodeName") and not _meta(pod).get("deletionTimestamp")


def _uses_template(pod: Obj, namespace: str, template: str) -> bool:
    if _meta(pod).get("namespace") != namespace:
        return False
    return any(
        rc.get("resourceClaimTemplateName") == template
        for rc in (pod.get("spec") or {}).get("resourceClaims") or []
    )


def _conditions(status: Obj) -> list[Obj]:
    return [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]


def _verdict(status: Obj) -> list[str]:
    """What the controller says: the Ready condition when False, a waiting deletion."""
    out = []
    for cond in _conditions(status):
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            out.append(f"{cond.get('reason')}: {cond.get('message')}")
        elif cond.get("type") == "Deleting" and cond.get("status") == "True":
            out.append(f"deleting ({cond.get('reason')}): {cond.get('message')}")
    return out


def status_view(
    cds: Iterable[Obj], daemon_pods: Iterable[Obj], pods: Iterable[Obj], events: Iterable[Obj]
) -> list[dict[str, Any]]:
    """One entry per ComputeDomain: status, nodes, cliques, daemon and workload pods, the
    workload pods no node was found for (with the scheduler's message), reasons."""
    daemon_pods, pods, events = list(daemon_pods), list(pods), list(events)
    out = []
    for cd in cds:
        meta, spec, status = _meta(cd), cd.get("spec") or {}, cd.get("status") or {}
        uid, ns = meta.get("uid", ""), meta.get("namespace", "")
        template = ((spec.get("channel") or {}).get("resourceClaimTemplate") or {}).get("name")
        nodes = sorted(
            status.get("nodes") or [], key=lambda n: (n.get("cliqueID", ""), n.get("index", 0))
        )
        daemons = [
            p
            for p in daemon_pods
            if (_meta(p).get("labels") or {}).get(names.COMPUTE_DOMAIN_LABEL) == uid
        ]
        workload = [p for p in pods if template and _uses_template(p, ns, template)]
        reasons = [
            f"daemon {_meta(p).get('name')} on {(p.get('spec') or {}).get('nodeName')}: "
            f"{_pod_reason(p)}"
            for p in daemons
            if not _ready(p)
        ]
        cd_events = sorted(
            (
                e
                for e in events
                if (e.get("involvedObject") or {}).get("uid") == uid and e.get("type") == "Warning"
            ),
            key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""),
        )
        if cd_events:
            last = cd_events[-1]
            reasons.insert(0, f"event {last.get('reason')}: {last.get('message')}")
        verdict = _verdict(status)
        cliques: dict[str, list[int]] = defaultdict(list)
        for n in nodes:
            cliques[n.get("cliqueID", "")].append(n.get("index", 0))
        out.append(
            {
                "namespace": ns,
                "name": meta.get("name"),
                "uid": uid,
                "status": status.get("status") or "Unknown",
                "reason": next(
                    (c.get("reason") for c in _conditions(status) if c.get("type") == "Ready"),
                    None,
                ),
                "readyNodes": sum(1 for n in nodes if n.get("status") == "Ready"),
                "totalNodes": len(nodes),
                "template": template,
                "nodes": [
                    {
                        "name": n.get("name"),
                        "cliqueID": n.get("cliqueID"),
                        "index": n.get("index"),
                        "ipAddress": n.get("ipAddress"),
                        "status": n.get("status"),
                    }
                    for n in nodes
                ],
                "cliques": {k: sorted(v) for k, v in cliques.items()},
                "daemonPods": [
                    {
                        "name": _meta(p).get("name"),
                        "node": (p.get("spec") or {}).get("nodeName"),
                        "ready": _ready(p),
                    }
                    for p in daemons
                ],
                "workloadPods": [
                    {
                        "name": _meta(p).get("name"),
                        "node": (p.get("spec") or {}).get("nodeName"),
                        "phase": (p.get("status") or {}).get("phase"),
                        "ready": _ready(p),
                    }
                    for p in workload
                ],
                "pendingPods": [
                    {"name": _meta(p).get("name"), "scheduler": _scheduler_says(p)}
                    for p in workload
                    if _pending(p)
                ],
                "reasons": verdict + (reasons if status.get("status") != "Ready" else []),
            }
        )
    return out


def topology_view(nodes: Iterable[Obj], cds: Iterable[Obj]) -> dict[str, Any]:
    """NVLink domains (cliques) → nodes with GPUs and which ComputeDomain holds each."""
    cd_by_uid = {
        _meta(cd).get("uid"): f"{_meta(cd).get('namespace')}/{_meta(cd).get('name')}" for cd in cds
    }
    cliques: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for node in sorted(nodes, key=lambda n: str(_meta(n).get("name"))):
        labels = _meta(node).get("labels") or {}
        status = node.get("status") or {}
        gpus = int((status.get("capacity") or {}).get("nvidia.com/gpu", 0) or 0)
        if not (gpus or labels.get(names.GPU_PRESENT_LABEL) == "true"):
            continue  # no GPU node (a control-plane node): not part of any NVLink domain
        holder = nodemark.domain_of(_meta(node)) or None
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        cliques[labels.get(names.GPU_CLIQUE_LABEL, "")].append(
            {
                "name": _meta(node).get("name"),
                "gpus": gpus,
                "ready": ready,
                "heldBy": cd_by_uid.get(holder, f"<deleted CD {holder}>") if holder else None,
            }
        )
    domains = []
    for clique, members in sorted(cliques.items(), key=lambda kv: (kv[0] == "", kv[0])):
        domains.append(
            {
                "clique": clique or None,
                "nodes": members,
                "gpus": sum(m["gpus"] for m in members),
                "free": sum(1 for m in members if m["heldBy"] is None and m["ready"]),
                "heldBy": sorted({m["heldBy"] for m in members if m["heldBy"]}),
            }
        )
    return {"domains": domains}
