#!/usr/bin/env python3
"""Who changes Node taints during a large formation, and why (issue 28 point 3).

At 4,608 virtual nodes kube-scheduler re-queued its parked pods 291,856 times on
``NodeUpdateNodeTaint`` events (eleventh pass); nothing of ours writes taints, so the likely
writer is kube-controller-manager's node-lifecycle controller: a node whose Lease was not renewed
within the grace period turns NotReady/Unknown and gets the ``unreachable``/``not-ready`` taints,
which are removed when it renews again. This follows a running sim's Nodes and node Leases from
outside and writes one line per change (JSON lines):

- ``taints``: a Node's taint keys changed (old → new);
- ``ready``: a Node's Ready condition changed (status, reason);
- ``lease_gap``: a node Lease was renewed more than ``--gap`` seconds after its previous renewal
  (as the watch delivered them), so a late heartbeat shows next to the taint it caused.

Usage (``SIM`` is ``$CD_SIM_HOME/sims/<name>``; it waits for the sim's API server)::

    python3 bench/node_watch.py --sim SIM --out FILE [--gap 10]

It runs until stopped (SIGINT or SIGTERM; a broken watch is re-opened, so stop it before the sim
goes) and then prints a summary: changes per kind, nodes affected, the largest Lease gaps.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import time
from pathlib import Path
from typing import Any, TextIO

from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node


def _taints(node: Any) -> tuple[str, ...]:
    return tuple(sorted(f"{t.key}:{t.effect}" for t in (node.spec.taints or ())))


def _ready(node: Any) -> str:
    for c in (node.status.conditions or ()) if node.status else ():
        if c.type == "Ready":
            return f"{c.status}/{c.reason}"
    return "none"


class Tracer:
    """Per-node last seen taints, Ready and Lease renewal; writes each change as it arrives."""

    def __init__(self, out: TextIO, gap: float) -> None:
        self._out, self._gap = out, gap
        self.taints: dict[str, tuple[str, ...]] = {}
        self.ready: dict[str, str] = {}
        self.renewed: dict[str, float] = {}
        self.counts: dict[str, int] = {"taints": 0, "ready": 0, "lease_gap": 0}
        self.nodes: dict[str, set[str]] = {k: set() for k in self.counts}
        self.gaps: list[tuple[float, str]] = []

    def _emit(self, kind: str, node: str, **fields: Any) -> None:
        self.counts[kind] += 1
        self.nodes[kind].add(node)
        line = {"t": round(time.time(), 3), "kind": kind, "node": node} | fields
        self._out.write(json.dumps(line) + "\n")
        self._out.flush()

    def node(self, node: Any) -> None:
        """A Node as the watch delivered it."""
        name = node.metadata.name
        taints, ready = _taints(node), _ready(node)
        if name in self.taints and self.taints[name] != taints:
            self._emit("taints", name, old=list(self.taints[name]), new=list(taints))
        if name in self.ready and self.ready[name] != ready:
            self._emit("ready", name, old=self.ready[name], new=ready)
        self.taints[name], self.ready[name] = taints, ready

    def lease(self, lease: Any) -> None:
        """A node Lease as the watch delivered it (each delivery is a renewal)."""
        name, now = lease.metadata.name, time.monotonic()
        before = self.renewed.get(name)
        self.renewed[name] = now
        if before is not None and now - before > self._gap:
            self.gaps.append((now - before, name))
            self._emit("lease_gap", name, seconds=round(now - before, 2))

    def summary(self) -> str:
        """Changes per kind, nodes affected, the largest Lease gaps."""
        lines = [f"{k}: {n} changes on {len(self.nodes[k])} nodes" for k, n in self.counts.items()]
        top = sorted(self.gaps, reverse=True)[:10]
        lines.append("largest Lease gaps: " + ", ".join(f"{n} {s:.1f}s" for s, n in top))
        return "\n".join(lines)


async def _follow(client: AsyncClient, kind: Any, handle: Any, **kw: Any) -> None:
    while True:
        try:
            async for _op, obj in client.watch(kind, **kw):
                handle(obj)
        except Exception as exc:  # the sim went away, or the watch broke: re-open
            print(f"watch {kind.__name__}: {exc!r}", flush=True)
            await asyncio.sleep(1)


async def _main(sim: Path, out: Path, gap: float) -> Tracer:
    config_path = sim / "controlplane/kubeconfig/admin.yaml"
    while not config_path.exists():
        await asyncio.sleep(1)
    client = AsyncClient(KubeConfig.from_file(config_path), timeout=120)  # type: ignore[arg-type]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with out.open("a") as f:
        tracer = Tracer(f, gap)
        tasks = [
            asyncio.create_task(_follow(client, Node, tracer.node)),
            asyncio.create_task(_follow(client, Lease, tracer.lease, namespace="kube-node-lease")),
        ]
        await stop.wait()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
    return tracer


def main() -> None:
    """Parse the command line, follow until stopped, print the summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", type=Path, required=True, help="the sim's folder")
    ap.add_argument("--out", type=Path, required=True, help="JSON lines, appended")
    ap.add_argument("--gap", type=float, default=10.0, help="Lease gap worth a line, seconds")
    args = ap.parse_args()
    tracer = asyncio.run(_main(args.sim, args.out, args.gap))
    print(tracer.summary(), flush=True)


if __name__ == "__main__":
    main()
