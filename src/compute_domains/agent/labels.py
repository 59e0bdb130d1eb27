"""Pure label logic of the resident agent: what a Node asks of it, what its pod should say.

* :func:`assignment_of` reads the node's CD label (written by the kubelet plugin's prepare while
  a channel claim of that CD lives on the node), else its warm-spare label
  ``compute-domains/warm-for`` (the controller's, issue 16: the CD's IMEX runs there before any
  workload, as a per-CD DaemonSet's pod would), and its clique ID label; None while the node
  serves no CD.
* :func:`wants_of` adds the per-clique scope: the label ``compute-domains/shared-imex=on``
  (the plugin's, ``api.sharedimex``) asks for the clique's shared IMEX, which needs a clique ID.
* :func:`pod_label_patch` is the merge patch that makes the agent's pod carry the CD label
  (NVIDIA's selectors, and our controller's caches, find a node's daemon pod by it) and the
  clique ID label (the daemon's request for a clique slot; a per-CD daemon pod sets it itself
  once it runs, the agent sets both in one write, one API round trip less before IMEX starts)
  while it serves a CD, and neither label once it stops: a pod without them asks for nothing
  and counts for no CD.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from compute_domains.agent.config import Assignment, Shared, Wants
from compute_domains.api import imexsignal, names, nodemark, sharedimex


def assignment_of(labels: Mapping[str, str] | None) -> Assignment | None:
    """The CD a Node with ``labels`` asks its agent to serve, or None. The CD label wins over
    the warm-spare label: the plugin gives a warm node to no other CD, so they differ only in a
    race, and the claim's CD is the one whose workload runs there."""
    labels = labels or {}
    domain_uid = labels.get(names.COMPUTE_DOMAIN_LABEL) or labels.get(names.WARM_FOR_LABEL) or ""
    if not domain_uid:
        return None
    return Assignment(domain_uid=domain_uid, clique_id=labels.get(names.GPU_CLIQUE_LABEL) or "")


def wants_of(labels: Mapping[str, str] | None) -> Wants:
    """Everything a Node with ``labels`` asks of its agent."""
    labels = labels or {}
    asked = labels.get(sharedimex.SHARED_IMEX_LABEL) == sharedimex.SHARED_IMEX_ON
    clique_id = labels.get(names.GPU_CLIQUE_LABEL) or ""
    return Wants(
        domain=assignment_of(labels),
        shared=Shared(clique_id) if asked and clique_id else None,
        shared_without_clique=asked and not clique_id,
        clique_id=clique_id,
    )


def node_labels(node: Any | None) -> dict[str, str]:
    """A lightkube Node's labels ({} for a missing Node), with the CD mark as a label when the
    plugin wrote it as an annotation (``api.nodemark``)."""
    meta = getattr(node, "metadata", None) if node is not None else None
    return nodemark.effective_labels(meta)


def pod_label_patch(
    serving: str | None, clique_id: str = "", *, leaving: Iterable[str] = ()
) -> dict[str, Any]:
    """Merge patch of the agent's pod labels: the CD label for ``serving`` and the clique ID
    label ``clique_id`` (empty on a node without multi-node NVLink, as a per-CD daemon writes
    it), or both removed. The IMEX readiness signal (``api.imexsignal``) of ``serving`` and of
    each CD in ``leaving`` is removed in the same write: one an earlier daemon of this process
    could not remove (killed, or its bounded removal timed out) must not stay behind."""
    stale = {
        imexsignal.key(uid): None for uid in sorted({*leaving, *([serving] if serving else [])})
    }
    if serving:
        wanted = {names.COMPUTE_DOMAIN_LABEL: serving, names.CLIQUE_ID_LABEL: clique_id}
        return {"metadata": {"labels": wanted, "annotations": stale}}
    gone: dict[str, Any] = {
        "labels": {names.COMPUTE_DOMAIN_LABEL: None, names.CLIQUE_ID_LABEL: None}
    }
    if stale:
        gone["annotations"] = stale
    return {"metadata": gone}


def signals_left(annotations: Mapping[str, str] | None) -> list[str]:
    """The CD UIDs whose IMEX readiness signal the pod's ``annotations`` still carry."""
    return sorted(
        k.removeprefix(imexsignal.PREFIX)
        for k in annotations or {}
        if k.startswith(imexsignal.PREFIX)
    )
