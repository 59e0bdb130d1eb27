"""Warm spares: the nodes a CD's ``compute-domains/warm-nodes`` annotation selects (issue 16).

A CD whose annotation ``names.WARM_NODES_ANNOTATION`` holds a label selector gets the node label
``names.WARM_FOR_LABEL=<CD UID>`` on every node it selects; its DaemonSet (``daemonset``) runs
on nodes with that label as well as on those with the CD's ``computeDomain`` label, so the CD's
IMEX daemons run, register and turn Ready there before any workload claim is prepared. The
kubelet plugin treats such a node as held by that CD (no other CD's channel claim lands there).

Rules (``plan`` is pure; ``WarmNodes.apply`` does the writes):
- a selected node with no warm label and no ``computeDomain`` label of another CD is labelled;
- a selected node warm for, or held by (``computeDomain`` label), another CD is skipped: a
  ``WarmNodeTaken`` Event names the node and that CD; a node we labelled that another CD took
  meanwhile (a race with the plugin's label) loses our label, so one node never runs two CDs'
  daemons;
- a node with our label that is no longer selected, or every one of them when the annotation is
  gone (and at teardown, ``teardown``), loses the label; a label is removed only while it still
  names this CD (JSON-patch ``test``), and written only on the node version read (``test`` of
  ``resourceVersion``), so a concurrent change makes the write fail and the CD is retried;
- a selector that does not parse: a ``InvalidWarmNodes`` Event and the ``WarmNodes``
  condition's message, nothing labelled (labels already set stay until it parses again),
  everything else served as usual.
The ``WarmNodes`` condition (present only with the annotation) says how many nodes are warm and
which were skipped and why.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from compute_domains.api import conditions, names
from compute_domains.controller import events, kubeapi, labelselector
from compute_domains.infra import errors

logger = logging.getLogger(__name__)

WARM_NODES: Final = "WarmNodes"
"""Condition type, present only on a CD with the annotation."""
ALL_WARM: Final = "AllSelectedWarm"
NODES_TAKEN: Final = "NodesTaken"
INVALID_SELECTOR: Final = "InvalidSelector"
WARM_NODE_TAKEN_EVENT: Final = "WarmNodeTaken"
INVALID_WARM_NODES_EVENT: Final = "InvalidWarmNodes"
_LISTED: Final = 5

_WARM_PATH: Final = "/metadata/labels/" + names.WARM_FOR_LABEL.replace("~", "~0").replace("/", "~1")


def annotation(cd: Any) -> str | None:
    """The warm-nodes selector of a raw CD (None without the annotation)."""
    value = (cd.metadata.annotations or {}).get(names.WARM_NODES_ANNOTATION)
    return None if value is None else str(value)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """What to write for one CD, and what to say about it."""

    error: str = ""
    """Why the selector does not parse ("" when it does, or there is none)."""
    label: tuple[str, ...] = ()
    unlabel: tuple[str, ...] = ()
    warm: tuple[str, ...] = ()
    """Nodes warm for the CD once the writes are done."""
    skipped: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Selected node → the UID of the CD that has it."""
    active: bool = False
    """Whether the CD has the annotation."""


def plan(
    domain_uid: str, selector: str | None, nodes: Iterable[tuple[str, Mapping[str, str]]]
) -> Plan:
    """The warm labels to write for CD ``domain_uid`` given every node's ``(name, labels)``."""
    nodes = list(nodes)
    mine = sorted(n for n, labels in nodes if labels.get(names.WARM_FOR_LABEL) == domain_uid)
    if selector is None:
        return Plan(unlabel=tuple(mine))
    try:
        parsed = labelselector.parse(selector)
    except labelselector.SelectorError as err:
        return Plan(
            error=f"annotation {names.WARM_NODES_ANNOTATION}: {err}", warm=tuple(mine), active=True
        )
    label, unlabel, warm, skipped = [], [], [], {}
    for name, labels in sorted(nodes):
        selected = parsed.matches(labels)
        warm_for = labels.get(names.WARM_FOR_LABEL, "")
        held_by = labels.get(names.COMPUTE_DOMAIN_LABEL, "")
        other = next((u for u in (held_by, warm_for) if u and u != domain_uid), "")
        if warm_for == domain_uid and (not selected or held_by not in ("", domain_uid)):
            unlabel.append(name)
            if selected:
                skipped[name] = held_by
        elif not selected:
            continue
        elif other:
            skipped[name] = other
        else:
            warm.append(name)
            if warm_for != domain_uid:
                label.append(name)
    return Plan(
        label=tuple(label), unlabel=tuple(unlabel), warm=tuple(warm), skipped=skipped, active=True
    )


def _some(items: list[str]) -> str:
    shown = ", ".join(items[:_LISTED])
    return shown + (f" and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


def condition(p: Plan, generation: int) -> conditions.Condition | None:
    """The ``WarmNodes`` condition of a CD with the annotation (None without)."""
    if not p.active:
        return None
    if p.error:
        status, reason, message = conditions.FALSE, INVALID_SELECTOR, f"{p.error}; no node labelled"
    else:
        message = (
            f"{len(p.warm)} node(s) warm: {_some(list(p.warm))}" if p.warm else "no node selected"
        )
        status, reason = conditions.TRUE, ALL_WARM
        if p.skipped:
            status, reason = conditions.FALSE, NODES_TAKEN
            taken = [f"{n} (ComputeDomain {u})" for n, u in sorted(p.skipped.items())]
            message += f"; skipped, taken by another ComputeDomain: {_some(taken)}"
    return conditions.Condition(
        type=WARM_NODES,
        status=status,
        reason=reason,
        message=message,
        observed_generation=generation,
    )


class WarmNodes:
    """Applies the warm plans of CDs; remembers what it announced so Events are not repeated."""

    def __init__(self, api: kubeapi.Api, recorder: events.EventRecorder) -> None:
        self._api = api
        self._events = recorder
        self._said: dict[str, frozenset[str]] = {}

    def forget(self, domain_uid: str) -> None:
        """Drop what was announced for a CD that is gone."""
        self._said.pop(domain_uid, None)

    async def apply(
        self, domain_uid: str, p: Plan, nodes: Mapping[str, Any], target: events.Target
    ) -> None:
        """Write the labels of ``p`` (nodes from the cache, by name) and announce news.

        Raises:
            errors.TemporaryError: a write failed (a node changed since it was cached).
        """
        said = set()
        if p.error:
            said.add(p.error)
        for node, other in sorted(p.skipped.items()):
            said.add(f"node {node} is taken by ComputeDomain {other}")
        for news in sorted(said - self._said.get(domain_uid, frozenset())):
            kind = INVALID_WARM_NODES_EVENT if news == p.error else WARM_NODE_TAKEN_EVENT
            message = news if news == p.error else f"warm spare {news}; not made warm"
            logger.warning(message, extra={"cd": f"{target.namespace}/{target.name}"})
            await self._events.emit(target, events.WARNING, kind, message)
        self._said[domain_uid] = frozenset(said)
        failures: list[errors.ComputeDomainsError] = []
        for name in p.unlabel:
            try:
                await remove_label(self._api, name, domain_uid)
            except errors.ComputeDomainsError as err:
                failures.append(err)
        for name in p.label:
            try:
                await self._label(nodes[name], domain_uid)
            except errors.ComputeDomainsError as err:
                failures.append(err)
        if failures:
            raise errors.TemporaryError(f"warm node labels: {failures[0]}") from failures[0]

    async def _label(self, node: Any, domain_uid: str) -> None:
        meta = node.metadata
        patch: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta.resourceVersion}
        ]
        if meta.labels:
            patch.append({"op": "add", "path": _WARM_PATH, "value": domain_uid})
        else:
            patch.append(
                {
                    "op": "add",
                    "path": "/metadata/labels",
                    "value": {names.WARM_FOR_LABEL: domain_uid},
                }
            )
        await self._api.patch(Node, meta.name, patch, patch_type=PatchType.JSON)
        logger.info(
            "node %s is a warm spare of ComputeDomain %s",
            meta.name,
            domain_uid,
            extra={"node": meta.name},
        )


async def remove_label(api: kubeapi.Api, node: str, domain_uid: str) -> None:
    """Remove the warm label from ``node`` if (and only if) it still names ``domain_uid``."""
    patch = [
        {"op": "test", "path": _WARM_PATH, "value": domain_uid},
        {"op": "remove", "path": _WARM_PATH},
    ]
    try:
        await api.patch(Node, node, patch, patch_type=PatchType.JSON)
    except (kubeapi.NotFound, errors.PermanentError) as err:
        logger.debug("node %s: warm label of %s not removed: %s", node, domain_uid, err)
        return
    logger.info(
        "node %s is no longer a warm spare of ComputeDomain %s",
        node,
        domain_uid,
        extra={"node": node},
    )
