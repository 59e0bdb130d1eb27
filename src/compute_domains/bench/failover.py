"""What ``Scenario.fail`` measured: the ``Failure`` record, derived from the timeline's marks.

``measure`` reads the marks since the node stop: when the node went NotReady, the lost pod was
removed (and by whom: the framework's force-delete reason, else the pod's condition), the
replacement was created, bound and Ready, a placeholder of its rack was preempted, the spare's
daemon and CD entry turned Ready (times relative to the stop), whether the spare was warm, and
every transition seen on another rack (none: that rack was untouched).

``scenario`` re-exports ``Failure``, where its callers have always found it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from compute_domains.bench import timeline
from compute_domains.sim import trainer


@dataclasses.dataclass(frozen=True, slots=True)
class Failure:
    """What ``fail`` measured; times in seconds after the node stop (None: not seen)."""

    node: str
    old_pod: str
    new_pod: str
    spare: str
    steps: dict[str, float | None]
    """``node_not_ready``, ``pod_removed``, ``replacement_created``, ``placeholder_preempted``,
    ``replacement_bound``, ``daemon_on_spare_ready``, ``replacement_ready``,
    ``spare_entry_ready`` (the CD's entry of the spare turned Ready)."""
    preempted: str
    """The placeholder the scheduler preempted, with the reason on its pod."""
    removal: str
    """Who removed the lost pod and why (the framework's reason, else the pod's condition)."""
    spare_was_warm: bool
    """The spare's daemon was Ready and its entry Ready before the failure."""
    other_racks_marks: list[str]
    """Every transition seen on another rack's nodes, pods, daemons or entries (none: untouched)."""


def measure(
    tl: timeline.Timeline,
    t0: float,
    node: str,
    old: Any,
    new: Any,
    rack: str,
    *,
    actions: list[trainer.Action],
    node_rack: dict[str, str],
    warm_at_failure: set[str],
) -> Failure:
    """What ``Scenario.fail`` measured from ``tl``'s marks since the stop at ``t0``: ``old`` (the
    lost rank's pod on ``node``) replaced by ``new`` in ``rack``; ``actions`` are the framework's,
    ``node_rack`` each node's rack, ``warm_at_failure`` the warm spares before the stop."""
    old_name, new_name = str(old.metadata.name), str(new.metadata.name)
    spare = str(new.spec.nodeName)

    def at(mark: timeline.Mark | None) -> float | None:
        return None if mark is None else round(mark.at - t0, 2)

    removed = [
        m for m in tl.since(t0) if m.name == old_name and m.what in ("pod-deleting", "pod-gone")
    ]
    preempted = next(
        (m for m in tl.since(t0) if m.what == "pod-deleting" and m.name.startswith("spare-")),
        None,
    )
    spare_daemon = next(
        (m for m in tl.since(t0) if m.what == "daemon-ready" and m.detail == spare),
        None,
    )
    spare_entry = next(
        (
            m
            for m in tl.since(t0)
            if m.what == "entry" and m.name == spare and m.detail.startswith("Ready")
        ),
        None,
    )
    by_framework = [a for a in actions if a.kind == "deleted" and a.pod == old_name]
    removal = (
        f"force-deleted by the framework: {by_framework[0].reason}"
        if by_framework
        else (removed[0].detail if removed else "")
    )
    others = [
        f"{m.what} {m.name} {m.detail}".strip()
        for m in tl.since(t0)
        if _other_rack(tl, node_rack, m, rack)
    ]
    return Failure(
        node=node,
        old_pod=old_name,
        new_pod=new_name,
        spare=spare,
        steps={
            "node_not_ready": at(tl.first(t0, "node-not-ready", node)),
            "pod_removed": at(removed[0] if removed else None),
            "replacement_created": at(tl.first(t0, "pod-created", new_name)),
            "placeholder_preempted": at(preempted),
            "replacement_bound": at(tl.first(t0, "pod-bound", new_name)),
            "daemon_on_spare_ready": at(spare_daemon),
            "replacement_ready": at(tl.first(t0, "pod-ready", new_name)),
            "spare_entry_ready": at(spare_entry),
        },
        preempted="" if preempted is None else f"{preempted.name} ({preempted.detail})",
        removal=removal,
        spare_was_warm=spare in warm_at_failure,
        other_racks_marks=others,
    )


def _other_rack(
    tl: timeline.Timeline, node_rack: dict[str, str], mark: timeline.Mark, rack: str
) -> bool:
    """Whether a mark concerns a node, pod, daemon or entry of another rack than ``rack``."""
    if mark.what.startswith("sim-node"):
        return False
    if mark.what.startswith(("node-", "entry")):
        node = mark.name
    elif mark.what.startswith("daemon-"):
        d = tl.daemons.get(mark.name)
        node = str(d.spec.nodeName) if d is not None else mark.detail
    else:
        p = tl.pods.get(mark.name)
        node = str(p.spec.nodeName or "") if p is not None else ""
        if not node:
            return not mark.name.startswith((f"train-{rack}-", f"spare-{rack}-"))
    return node_rack.get(node, rack) != rack
