"""A node host's default executor (``sim.agent.install_executor``): every node's blocking step
runs at once, as each real kubelet runs its own (issue 26 point 6: a claim checkpoint write
queued behind other nodes' in asyncio's default 6 threads on 2 cores)."""

from __future__ import annotations

import asyncio
import threading

from compute_domains.sim import agent

NODES = 18


async def test_every_nodes_blocking_steps_run_at_once() -> None:
    agent.install_executor(NODES)
    # Two blocking steps in flight per node (a claim step's checkpoint writes): each waits
    # until all are running, so the barrier breaks if any of them queues for a thread.
    barrier = threading.Barrier(2 * NODES, timeout=5)
    await asyncio.gather(*(asyncio.to_thread(barrier.wait) for _ in range(2 * NODES)))
