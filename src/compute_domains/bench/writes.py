"""Writes per formation, per kind and per node, for each driver: who makes each and why (issue 17).

``docs/benchmarks.md`` holds one generated block between
``<!-- bench:writes before=FILE after=FILE -->`` and ``<!-- /bench:writes -->``: the two result
files under ``bench/results/`` it compares (``before`` and ``after`` a change of ours). For
every N of the ``after`` file it tabulates each write kind (``VERB resource``, subresources
summed, as ``apiserver_request_total`` counts them; Leases left out) per node: ours before,
ours after and NVIDIA's (from ``after`` when it has NVIDIA's runs, else ``before``), with who
makes the write and why ours needs it (``WRITERS``, attributed once from the API server's audit
log of a formation, user and user agent per request). Failed requests (409 races) count: the
API server served them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from compute_domains.bench.apicounts import WRITE_VERBS

WRITERS: dict[str, tuple[str, str]] = {
    "PATCH pods": (
        "sim kubelet (pods/status), resource-claim controller (pods/status), our daemon",
        "ours: 1 per node, the daemon labels its own pod with its clique ID (NVIDIA's daemon "
        "does the same); the controller maps daemon pods to cliques by it",
    ),
    "POST events": (
        "scheduler, sim kubelet, DaemonSet/ReplicaSet/resource-claim controllers, our controller",
        "ours: DaemonSetCreated (1 per CD) and NodeJoined (one per status write that lists new "
        "nodes at one place, not one per node)",
    ),
    "PATCH events": (
        "Kubernetes controllers' Event aggregation ('combined from similar events')",
        "ours: none while forming; our recorder bumps a count only when the same Event recurs",
    ),
    "PUT resourceclaims": ("scheduler (allocation and its status)", "-"),
    "POST resourceclaims": ("resource-claim controller (one claim per pod)", "-"),
    "POST pods": ("ReplicaSet and DaemonSet controllers", "-"),
    "POST serviceaccounts": ("sim kubelet (serviceaccounts/token for each pod's token)", "-"),
    "PUT computedomaincliques": (
        "our daemons (NVIDIA's: theirs)",
        "join: an index is taken by an update with optimistic concurrency (so two nodes never "
        "share one); a 409 is a lost race, re-read and retried; also the deregistration",
    ),
    "PATCH computedomaincliques": (
        "our daemons",
        "the Ready report: a JSON patch of the daemon's own entry status, no resourceVersion, "
        "so it never conflicts (1 per node)",
    ),
    "POST computedomaincliques": (
        "the first daemon of a clique",
        "creates the clique (a 409 when two daemons create it at once)",
    ),
    "PATCH computedomains": (
        "our controller (NVIDIA's: PUT)",
        "the finalizer (1 per CD) and the status: a verdict change at once, progress (entries "
        "joining, turning Ready) at most once per second",
    ),
    "PUT computedomains": ("NVIDIA's controller (status, finalizer)", "-"),
    "PATCH nodes": (
        "our kubelet plugin (label), sim kubelet (nodes/status)",
        "ours: 1 per node, the node label that places the CD's daemon pod (NVIDIA: a PUT)",
    ),
    "PUT nodes": ("NVIDIA's kubelet plugin (the node label)", "-"),
    "PUT resourceslices": (
        "our kubelet plugin",
        "1 per node: the node's channel slots carry the CD that holds it (the domain attribute "
        "the workload template selects on), so the scheduler never puts another CD's pods "
        "there; NVIDIA publishes one fixed slice and has no such binding",
    ),
    "PUT daemonsets": ("DaemonSet controller (status)", "-"),
    "PUT deployments": ("Deployment controller (status)", "-"),
    "PUT replicasets": ("ReplicaSet controller (status)", "-"),
    "POST daemonsets": ("our controller (NVIDIA's: theirs)", "the CD's daemon DaemonSet, 1 per CD"),
    "POST resourceclaimtemplates": (
        "our controller (NVIDIA's: theirs)",
        "the daemon and the workload template, 2 per CD",
    ),
    "POST controllerrevisions": ("DaemonSet controller", "-"),
    "POST replicasets": ("Deployment controller", "-"),
    "POST deployments": ("the bench (the workload)", "-"),
    "POST computedomains": ("the bench (the CD)", "-"),
    "POST endpoints": ("kube-apiserver (its own Service endpoints; refused, 422)", "-"),
}
"""``VERB resource`` → (who writes it in a formation, why ours is needed or "-" when it is
Kubernetes' own write, the same for both drivers)."""

TEARDOWN_WRITERS: dict[str, tuple[str, str]] = {
    "DELETE pods": ("DaemonSet controller, garbage collector, sim kubelet (final delete)", "-"),
    "DELETE resourceclaims": ("resource-claim controller, garbage collector (409 if both)", "-"),
    "PUT resourceclaims": ("resource-claim controller (deallocation)", "-"),
    "PATCH pods": ("sim kubelet (pods/status while terminating)", "-"),
    "POST events": (
        "sim kubelet (Killing), DaemonSet controller, our controller",
        "ours: NodeLeft (one per status write for the nodes that left) and WaitingForWorkload "
        "(when the wait begins and when a pod not named before holds a claim, not per pod "
        "leaving)",
    ),
    "PUT computedomaincliques": (
        "our daemons (NVIDIA's: theirs)",
        "each daemon removes its own entry on shutdown (optimistic concurrency; a 409 is a lost "
        "race); before a693d7f also the re-join of a clique the teardown had deleted",
    ),
    "POST computedomaincliques": (
        "our daemons (before a693d7f)",
        "none: a daemon no longer re-creates a clique deleted while its CD is being deleted",
    ),
    "PATCH computedomaincliques": (
        "our daemons (before a693d7f), garbage collector (owner references)",
        "none: it was the Ready report into a re-created clique",
    ),
    "DELETE computedomaincliques": ("our controller's teardown", "the CD's cliques, 1 each"),
    "PATCH nodes": (
        "our kubelet plugin (label), sim kubelet (nodes/status)",
        "ours: 1 per node, the node label goes once the node's last channel claim is unprepared",
    ),
    "PUT resourceslices": (
        "our kubelet plugin",
        "1 per node: the node's channel slots drop the CD's binding, so another CD's pods may "
        "be placed there",
    ),
    "PATCH computedomains": (
        "our controller",
        "the Deleting condition while the deletion waits, then the finalizer's removal",
    ),
    "DELETE resourceclaimtemplates": ("our controller", "the CD's two templates"),
    "PATCH resourceclaimtemplates": ("our controller", "their finalizers, once deleted"),
    "DELETE daemonsets": ("our controller", "the CD's DaemonSet"),
    "PATCH daemonsets": ("our controller", "its finalizer, once deleted"),
    "DELETE computedomains": ("the bench", "-"),
    "DELETE deployments": ("the bench", "-"),
    "DELETE controllerrevisions": ("garbage collector", "-"),
    "DELETE replicasets": ("garbage collector", "-"),
}
"""Teardown's own answers where they differ from the formation's (``WRITERS``)."""

_MARKER = re.compile(
    r"(<!-- bench:writes before=(?P<before>\S+) after=(?P<after>\S+) -->\n).*?"
    r"(^<!-- /bench:writes -->)",
    re.S | re.M,
)


def writes(requests: dict[str, int]) -> dict[str, int]:
    """Non-Lease writes of one run by ``VERB resource`` (subresources already summed)."""
    out: dict[str, int] = {}
    for key, n in requests.items():
        verb, _, resource = key.partition(" ")
        if verb in WRITE_VERBS and resource != "leases":
            out[key] = out.get(key, 0) + n
    return out


def _run(doc: dict[str, Any], driver: str, n: int, field: str) -> dict[str, int] | None:
    for r in doc.get("results", []):
        if r.get("driver", "ours") == driver and r["n"] == n and r.get("runs"):
            found = r["runs"][0].get(field)
            return writes(found) if found else None
    return None


def table(before: dict[str, Any], after: dict[str, Any], n: int, field: str) -> list[str]:
    """Rows of one N: each write kind per node (first run of each file), who, why."""
    ours_b = _run(before, "ours", n, field)
    ours_a = _run(after, "ours", n, field)
    nvidia = _run(after, "nvidia", n, field) or _run(before, "nvidia", n, field)
    columns = [("ours before", ours_b), ("ours after", ours_a), ("NVIDIA", nvidia)]
    present = [(name, c) for name, c in columns if c is not None]
    keys = sorted(
        {k for _, c in present for k in c},
        key=lambda k: (-max(c.get(k, 0) for _, c in present), k),
    )
    rows = [
        "| write | " + " | ".join(name for name, _ in present) + " | who writes it | "
        "why ours is needed |",
        "|---|" + "---:|" * len(present) + "---|---|",
    ]
    known = {**WRITERS, **TEARDOWN_WRITERS} if field == "requests_teardown" else WRITERS
    for key in keys:
        who, why = known.get(key, ("?", "?"))
        cells = " | ".join(f"{c.get(key, 0) / n:.1f}" for _, c in present)
        rows.append(f"| {key} | {cells} | {who} | {why} |")
    totals = " | ".join(f"**{sum(c.values()) / n:.1f}** ({sum(c.values())})" for _, c in present)
    rows.append(f"| **all, per node (total)** | {totals} | | |")
    return rows


def render(before: dict[str, Any], after: dict[str, Any], before_name: str, after_name: str) -> str:
    """The whole block: per N of ``after``, formation and (when recorded) teardown."""
    out: list[str] = []
    for r in after.get("results", []):
        n = r["n"]
        if r.get("driver", "ours") != "ours":
            continue
        out += ["", f"**N = {n}, formation** (writes per node):", ""]
        out += table(before, after, n, "requests_formation")
        if _run(after, "ours", n, "requests_teardown"):
            out += ["", f"**N = {n}, teardown** (writes per node; none recorded before):", ""]
            out += table(before, after, n, "requests_teardown")
    out += [
        "",
        f"Sources: before `{before_name}`, after `{after_name}` (first run of each; one round "
        "is one sample, and Kubernetes' own controllers vary by a few writes between runs).",
    ]
    return "\n".join(out[1:])


def update_doc(text: str, results_dir: Path) -> str:
    """``text`` with its ``bench:writes`` block (if any) rendered from the files it names."""
    match = _MARKER.search(text)
    if match is None:
        return text
    docs = {}
    for which in ("before", "after"):
        docs[which] = json.loads((results_dir / match.group(which)).read_text())
    body = render(docs["before"], docs["after"], match.group("before"), match.group("after"))
    head, tail = match.group(1), match.group(4)
    return text[: match.start()] + head + body + "\n" + tail + text[match.end() :]
