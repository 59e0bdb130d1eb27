#!/usr/bin/env python3
"""Scrape a running sim's kube-scheduler ``/metrics``: which cluster events re-queued how many
parked pods, and what handling them cost (issue 28 point 4, the scheduler's share).

kube-scheduler re-examines its parked pods on every cluster event a plugin registered for
(a ResourceSlice update, a Node label change, a new ResourceClaim, ...). Its own counters say
how many pods each event moved (``scheduler_queue_incoming_pods_total{event,queue}``), how long
handling each event took (``scheduler_event_handling_duration_seconds{event}``) and what the
plugins' queueing hints cost (``scheduler_queueing_hint_execution_duration_seconds``); this
keeps those families and a few totals, so two shapes' formations can be told apart by the
events they cause. The page is read and parsed as the formation benchmark does it
(``compute_domains.sim.componentmetrics``: the address the sim recorded, the admin identity;
``compute_domains.bench.schedevents``), which records the same counts per run; this script
scrapes on a schedule of its own beside any run, from a checkout's or a bench bundle's venv.

Usage (``SIM`` is ``$CD_SIM_HOME/sims/<name>``)::

    python3 bench/sched_metrics.py --sim SIM --out DIR [--every 10 --until-gone]

Writes ``DIR/sched-<pid>-<unix time>.prom`` (the kept lines) per scrape; with ``--until-gone``
it scrapes every ``--every`` seconds until the sim's scheduler is gone (or a new one is up, which
it then follows: one bench invocation starts a fresh sim per round). ``--summary FILE...``
prints, for the given scrapes, the events sorted by the pods they moved; with ``--since BASE``
each less the counts of an earlier scrape of the same scheduler (e.g. the last before an apply).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from compute_domains.bench.schedevents import keep, less, summary
from compute_domains.sim import componentmetrics, errors, state


def _scrape(sim: Path) -> tuple[int, str] | None:
    """The scheduler's pid and its kept lines, or None (no sim yet, between rounds, or gone)."""
    try:
        path = sim / "controlplane" / "endpoints.json"
        endpoints = state.Endpoints.from_json(path.read_text())
        page = componentmetrics.read(endpoints, "kube-scheduler")
        return endpoints.pids["kube-scheduler"], keep(page)
    except (OSError, KeyError, ValueError, TypeError, errors.SimError):
        return None


def main() -> int:
    """Scrape once (or until the sim is gone), or print summaries."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--every", type=float, default=10.0)
    ap.add_argument("--until-gone", action="store_true")
    ap.add_argument("--summary", type=Path, nargs="+")
    ap.add_argument("--since", type=Path, help="with --summary: an earlier scrape to subtract")
    args = ap.parse_args()
    if args.summary:
        base = args.since.read_text() if args.since else ""
        for path in args.summary:
            print(f"== {path}\n{summary(less(path.read_text(), base))}\n")
        return 0
    if args.sim is None or args.out is None:
        ap.error("--sim and --out are needed to scrape")
    args.out.mkdir(parents=True, exist_ok=True)
    scraped = misses = 0
    while True:
        got = _scrape(args.sim)
        if got is not None:
            pid, text = got
            (args.out / f"sched-{pid}-{int(time.time())}.prom").write_text(text)
            scraped += 1
            misses = 0
        elif not args.until_gone:
            print("no kube-scheduler answered", file=sys.stderr)
            return 1
        else:
            misses += 1
        if not args.until_gone or (scraped and misses * args.every > 600):
            return 0
        time.sleep(args.every)


if __name__ == "__main__":
    raise SystemExit(main())
