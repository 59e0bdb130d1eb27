"""kube-scheduler's own counters: which cluster events re-queued how many parked pods.

kube-scheduler re-examines the pods it parked on every cluster event a plugin registered for (a
ResourceSlice update, a Node label change, a new ResourceClaim, ...); with no queueing hint it
moves every pod the plugin had rejected. Its ``/metrics`` count that
(``scheduler_queue_incoming_pods_total{event,queue}``) and the time handling each event took
(``scheduler_event_handling_duration_seconds{event}``). A formation's own writes show up there:
the difference of two scrapes, one before the apply and one once formed, is what the formation
made the scheduler do (issue 28 point 4). Pure text in, numbers out; ``bench/sched_metrics.py``
and the formation benchmark read the pages.
"""

from __future__ import annotations

import re

KEPT = (
    "scheduler_queue_incoming_pods_total",
    "scheduler_event_handling_duration_seconds_sum",
    "scheduler_event_handling_duration_seconds_count",
    "scheduler_queueing_hint_execution_duration_seconds_sum",
    "scheduler_queueing_hint_execution_duration_seconds_count",
    "scheduler_schedule_attempts_total",
    "scheduler_scheduling_attempt_duration_seconds_sum",
    "scheduler_scheduling_attempt_duration_seconds_count",
    "scheduler_pending_pods",
    "scheduler_unschedulable_pods",
    "process_cpu_seconds_total",
)
"""The families kept from a page (no histogram buckets)."""
_SAMPLE = re.compile(r"^(?P<name>[a-z_:]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
Sample = tuple[str, dict[str, str], float]


def keep(text: str) -> str:
    """The lines of the families in ``KEPT`` (no comments)."""
    return "".join(line + "\n" for line in text.splitlines() if line.startswith(KEPT))


def parse(text: str) -> list[Sample]:
    """(name, labels, value) of each sample line; comments and other lines are skipped."""
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        try:
            value = float(m["value"])
        except ValueError:
            continue
        out.append((m["name"], dict(_LABEL.findall(m["labels"] or "")), value))
    return out


def less(text: str, base: str) -> str:
    """``text``'s samples less ``base``'s (same name and labels): the counts in between."""
    before = {(n, tuple(sorted(lb.items()))): v for n, lb, v in parse(base)}
    lines = []
    for name, labels, value in parse(text):
        key = tuple(sorted(labels.items()))
        inner = ",".join(f'{k}="{v}"' for k, v in key)
        lines.append(f"{name}{{{inner}}} {value - before.get((name, key), 0.0):g}")
    return "\n".join(lines)


def moved(text: str) -> dict[str, int]:
    """Event → pods it put in a queue (a new pod's own add, or parked pods a cluster event
    moved back), all queues, most first; only events that moved any."""
    counts: dict[str, float] = {}
    for name, labels, value in parse(text):
        if name == "scheduler_queue_incoming_pods_total" and value:
            event = labels.get("event", "")
            counts[event] = counts.get(event, 0.0) + value
    return {e: round(c) for e, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def handling(text: str) -> dict[str, tuple[int, float]]:
    """Event → (events handled, seconds handling them), longest first; only events seen."""
    pairs: dict[str, list[float]] = {}
    for name, labels, value in parse(text):
        kind = name.removeprefix("scheduler_event_handling_duration_seconds_")
        if kind in ("count", "sum"):  # never a histogram's buckets
            pair = pairs.setdefault(labels.get("event", ""), [0.0, 0.0])
            pair[0 if kind == "count" else 1] += value
    seen = {e: (round(n), s) for e, (n, s) in pairs.items() if n}
    return dict(sorted(seen.items(), key=lambda kv: (-kv[1][1], kv[0])))


def summary(text: str) -> str:
    """Events by pods moved, with their handling; attempts and CPU (a console table)."""
    moves, handled = moved(text), handling(text)
    lines = [f"{'event':<48} {'pods moved':>11} {'handled':>9} {'handling s':>11}"]
    for event in [*moves, *(e for e in handled if e not in moves)]:
        n, s = handled.get(event, (0, 0.0))
        lines.append(f"{event:<48} {moves.get(event, 0):>11} {n:>9} {s:>11.3f}")
    totals: dict[str, float] = {}
    for name, labels, value in parse(text):
        if name in ("scheduler_schedule_attempts_total", "process_cpu_seconds_total"):
            key = f"{name}{{{labels.get('result', '')}}}" if labels else name
            totals[key] = totals.get(key, 0.0) + value
    lines += [f"{k} = {v:g}" for k, v in sorted(totals.items())]
    return "\n".join(lines)
