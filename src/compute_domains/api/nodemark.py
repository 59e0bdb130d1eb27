"""How a Node says which per-domain ComputeDomain it serves: its *mark* (pure).

The kubelet plugin marks its Node with the UID of the per-domain CD whose channel claim it
prepares (``names.COMPUTE_DOMAIN_LABEL`` as the key) and removes the mark with that CD's last
claim; the controller's teardown removes a mark left behind. Two forms, chosen by the
cluster (the chart's ``imex.nodeMark``, the plugin's ``NODE_MARK``; docs/decisions/0026):

- ``label`` (NVIDIA's, the default): the Node *label*. A per-CD DaemonSet selects its nodes by
  it, so it is the only form that works without resident agents.
- ``annotation`` (resident agents only): the same key and value as a Node *annotation*. With
  resident agents nothing selects nodes by the mark, and a label change is a cluster event
  kube-scheduler re-queues every pod parked for its claim on (its DRA plugin registers Node
  label updates without a queueing hint), once per node of a formation: quadratic in N. No
  scheduler plugin registers annotation updates.

Whichever form the plugin writes, every reader takes either (``domain_of``,
``effective_labels``): the label wins when both are set, which happens only between a switch of
the form and the next write. What the scheduler sees of a node's holder is unchanged in both
forms: the channel slots' ``domain`` attribute (``api.sharedimex``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

from compute_domains.api import names

KEY: Final = names.COMPUTE_DOMAIN_LABEL
"""The mark's key, as a label or as an annotation."""


class Form(enum.StrEnum):
    """Where the plugin writes a node's mark."""

    LABEL = "label"
    ANNOTATION = "annotation"


def parse_form(raw: str) -> Form:
    """The form named by ``raw``.

    Raises:
        ValueError: ``raw`` names no form (the message names the allowed ones).
    """
    try:
        return Form(raw)
    except ValueError:
        known = ", ".join(f.value for f in Form)
        raise ValueError(f"node mark {raw!r} is not one of {known}") from None


def _field(meta: Any, name: str) -> Mapping[str, str]:
    if meta is None:
        return {}
    value = meta.get(name) if isinstance(meta, Mapping) else getattr(meta, name, None)
    return value or {}


def domain_of(meta: Any) -> str:
    """The CD UID a Node's metadata (a lightkube ``ObjectMeta`` or a dict) marks ("" when
    none): its label, else its annotation."""
    found = _field(meta, "labels").get(KEY) or _field(meta, "annotations").get(KEY)
    return str(found or "")


def index(node: Any) -> tuple[str, ...]:
    """Index function of Nodes (objects with ``metadata``) by the CD their mark names."""
    found = domain_of(getattr(node, "metadata", None))
    return (found,) if found else ()


def effective_labels(meta: Any) -> dict[str, str]:
    """A Node's labels with its mark as a label when it is written as an annotation: what every
    reader that judges a node by its labels (held, warm, shared) should see."""
    labels = dict(_field(meta, "labels"))
    mark = _field(meta, "annotations").get(KEY)
    if mark and not labels.get(KEY):
        labels[KEY] = str(mark)
    return labels


def write_patch(form: Form, value: str | None, version: str | None) -> dict[str, Any]:
    """Merge patch that sets (``value``) or removes (None) the mark in ``form``, conditional on
    ``version`` (a concurrent writer gets a 409). A removal clears both forms, so a mark
    written before a switch of the form never stays behind."""
    meta: dict[str, Any] = {"resourceVersion": version}
    if value is None:
        meta["labels"] = {KEY: None}
        meta["annotations"] = {KEY: None}
    elif form is Form.LABEL:
        meta["labels"] = {KEY: value}
    else:
        meta["annotations"] = {KEY: value}
    return {"metadata": meta}
