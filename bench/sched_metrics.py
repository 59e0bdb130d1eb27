#!/usr/bin/env python3
"""Scrape a running sim's kube-scheduler ``/metrics``: which cluster events re-queued how many
parked pods, and what handling them cost (issue 28 point 4, the scheduler's share).

kube-scheduler re-examines its parked pods on every cluster event a plugin registered for
(a ResourceSlice update, a Node label change, a new ResourceClaim, ...). Its own counters say
how many pods each event moved (``scheduler_queue_incoming_pods_total{event,queue}``), how long
handling each event took (``scheduler_event_handling_duration_seconds{event}``) and what the
plugins' queueing hints cost (``scheduler_queueing_hint_execution_duration_seconds``); this
keeps those families and a few totals, so two shapes' formations can be told apart by the
events they cause. The sim starts kube-scheduler with its secure port on loopback; the admin
identity may read ``/metrics``. The parsing is ``compute_domains.bench.schedevents`` (the
formation benchmark records the same counts per run); this script scrapes on a schedule of its
own beside any run, from a checkout's or a bench bundle's venv.

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
import json
import ssl
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from compute_domains.bench.schedevents import keep, less, summary

sys.path.insert(0, str(Path(__file__).parent))
import pprof_fetch  # this folder's sibling, not a package


def _scrape(ctx: ssl.SSLContext, sim: Path) -> tuple[int, str] | None:
    try:
        endpoints = json.loads((sim / "controlplane" / "endpoints.json").read_text())
        pid = int(endpoints["pids"]["kube-scheduler"])
        url = f"https://127.0.0.1:{pprof_fetch._port(pid)}/metrics"
        with urllib.request.urlopen(url, context=ctx, timeout=20) as resp:
            return pid, keep(resp.read().decode())
    except (OSError, KeyError, ValueError, SystemExit):
        return None  # no sim yet, between rounds, or gone


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
    scraped = 0
    with tempfile.TemporaryDirectory() as scratch:
        ctx: ssl.SSLContext | None = None
        misses = 0
        while True:
            admin = args.sim / "controlplane" / "admin.kubeconfig"
            try:
                endpoints = json.loads((args.sim / "controlplane" / "endpoints.json").read_text())
                admin = Path(endpoints["admin_kubeconfig"])
                ctx = pprof_fetch._context(admin, Path(scratch))
            except (OSError, KeyError, ValueError):
                ctx = None
            got = _scrape(ctx, args.sim) if ctx is not None else None
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
