"""The daemon's peer watch against the IMEX stand-in: the real ``-N -j`` path, a killed peer.

Two stand-in IMEX daemons run in this process (as on the simulator's virtual nodes); node 0's
peer watch asks through the in-process launcher, cued by node 0's own log lines. While both
run, nothing is reported; once node 1 is killed, node 1 is reported, and not before the bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time

import pytest

from compute_domains.daemon import peerwatch
from compute_domains.daemon.config import PeerLossSettings
from tests.unit.sim.test_imex_inproc import Node, _lines_until, nodes  # noqa: F401


@pytest.mark.slow_unit(8, "two stand-in IMEX daemons connect; the loss must outlast the bound")
async def test_a_killed_peer_is_reported_after_the_bound(nodes: list[Node]) -> None:  # noqa: F811
    children = [
        await n.launcher.spawn(
            ["nvidia-imex", "-c", str(n.cfg)], env=None, cwd=None, parent_death_signal=None
        )
        for n in nodes
    ]
    for child in children:
        assert child.stderr is not None
        await _lines_until(child.stderr, "Connection established to node 1")
    reports: list[tuple[float, dict[int, str]]] = []
    watch = peerwatch.PeerWatch(
        nodes[0].launcher.run,
        ctl="nvidia-imex-ctl",
        config=nodes[0].cfg,
        settings=PeerLossSettings(bound=1.0),  # 2 s by default; the unit suite is fast
        on_report=lambda r: reports.append((time.monotonic(), r)),
    )
    watch.set_peers(0, [0, 1])
    await watch.check()
    assert reports == []  # both links up

    async def pump() -> None:
        stream = children[0].stderr
        assert stream is not None
        while line := await stream.readline():
            watch.cue(line.decode())

    tasks = [asyncio.create_task(watch.run()), asyncio.create_task(pump())]
    try:
        killed = time.monotonic()
        children[1].send_signal(signal.SIGKILL)
        async with asyncio.timeout(10):
            while not reports:
                await asyncio.sleep(0.05)
        at, report = reports[0]
        assert set(report) == {1}
        assert 1.0 <= at - killed < 2.5, at - killed
    finally:
        for task in tasks:
            task.cancel()
        children[0].terminate()
        with contextlib.suppress(Exception):
            await children[0].wait()
