"""The daemon's peer watch: which peers its IMEX lost past the bound, and the note it writes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from compute_domains.api import names
from compute_domains.api.clique import CliqueDaemon, ComputeDomainClique
from compute_domains.daemon import cliqueentry, peerwatch
from compute_domains.daemon.config import Identity, PeerLossSettings
from compute_domains.sim import imex_report
from compute_domains.sim.imex_wire import Link

CLIQUE_ID = "5b1c0d6e-0000-4000-8000-000000000001.7"
ME = Identity(
    node_name="n0",
    pod_name="daemon-n0",
    pod_namespace="driver",
    pod_uid="uid",
    pod_ip="10.0.0.1",
    clique_id=CLIQUE_ID,
    domain_uid="cd-uid",
)


def _answer(links: dict[int, Link]) -> str:
    """The stand-in's ``-N -j`` text for node 0 with ``links`` (the peers' rows unavailable)."""
    rows = [
        imex_report.NodeRow(node_id=0, host="h0", status="READY", connections=links),
        *(imex_report.NodeRow.unavailable(k, f"h{k}") for k in links if k),
    ]
    return imex_report.format_json(rows, timestamp="t")


def test_lost_links_reads_our_row_of_the_real_json_shape() -> None:
    text = _answer(
        {0: Link.CONNECTED, 1: Link.RECOVERING, 2: Link.NEVER_CONNECTED, 3: Link.DISCONNECTED}
    )
    assert peerwatch.lost_links(text, 0) == {1: "RECOVERING", 3: "DISCONNECTED"}
    assert peerwatch.lost_links("not json", 0) is None
    assert peerwatch.lost_links(text, 7) is None  # no row of ours


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0


class _Ctl:
    """Answers ``-N -j`` with the links it is told, counting the queries."""

    def __init__(self) -> None:
        self.links: dict[int, Link] = {0: Link.CONNECTED, 1: Link.CONNECTED, 2: Link.CONNECTED}
        self.argv: list[Sequence[str]] = []

    async def run(self, argv: Sequence[str], timeout: float) -> tuple[int, str]:
        self.argv.append(argv)
        return 0, _answer(self.links)


def _watch(ctl: _Ctl, clock: _Clock, reports: list[dict[int, str]]) -> peerwatch.PeerWatch:
    watch = peerwatch.PeerWatch(
        ctl.run,
        ctl="nvidia-imex-ctl",
        config=Path("/imexd/imexd.cfg"),
        settings=PeerLossSettings(bound=2.0),
        on_report=reports.append,
        clock=lambda: clock.now,
        wall=lambda: 1_800_000_000.0 + clock.now,
    )
    watch.set_peers(0, [0, 1, 2])
    return watch


async def test_a_peer_is_reported_once_its_link_stays_lost_past_the_bound() -> None:
    ctl, clock, reports = _Ctl(), _Clock(), []
    watch = _watch(ctl, clock, reports)
    ctl.links[1] = Link.RECOVERING
    await watch.check()
    assert reports == []  # seen lost, not for long enough
    clock.now += 1.9
    await watch.check()
    assert reports == []
    clock.now += 0.2
    await watch.check()
    assert reports == [{1: peerwatch.stamp(1_800_000_100.0)}]
    await watch.check()
    assert len(reports) == 1  # only changes are reported
    ctl.links[1] = Link.CONNECTED
    await watch.check()
    assert reports[-1] == {}
    assert ctl.argv[0] == ["nvidia-imex-ctl", "-c", "/imexd/imexd.cfg", "-N", "-j"]


async def test_a_link_back_within_the_bound_or_kept_by_a_slow_peer_reports_nothing() -> None:
    ctl, clock, reports = _Ctl(), _Clock(), []
    watch = _watch(ctl, clock, reports)
    for _ in range(5):  # a flapping link: lost, back within the bound, lost again
        ctl.links[2] = Link.RECOVERING
        await watch.check()
        clock.now += 1.5
        ctl.links[2] = Link.CONNECTED
        await watch.check()
        clock.now += 1.5
    assert reports == []


async def test_only_a_loss_cues_a_query_and_a_peer_outside_the_clique_is_not_reported() -> None:
    ctl, clock, reports = _Ctl(), _Clock(), []
    watch = _watch(ctl, clock, reports)
    watch.set_peers(0, [0, 1])  # node 2 left the clique
    ctl.links[2] = Link.DISCONNECTED
    task = asyncio.create_task(watch.run())
    try:
        watch.cue("[INFO] Connection established to node 1 with ip address 10.0.0.2.")
        await asyncio.sleep(peerwatch.SETTLE * 2)
        assert ctl.argv == []  # nothing is tracked: a connection line asks nothing
        watch.cue("[ERROR] Node disconnect event detected for node 2 with address 10.0.0.3")
        await asyncio.sleep(peerwatch.SETTLE * 2)
        assert len(ctl.argv) == 1
        clock.now += 5
        await watch.check()
        assert reports == []
    finally:
        task.cancel()


def _clique(annotations: dict[str, str] | None = None) -> ComputeDomainClique:
    clique = ComputeDomainClique.new(domain_uid="cd-uid", clique_id=CLIQUE_ID, namespace="driver")
    daemons = tuple(
        CliqueDaemon(node_name=n, ip_address=ip, clique_id=CLIQUE_ID, index=i)
        for n, ip, i in (("n0", "10.0.0.1", 0), ("n1", "10.0.0.2", 1))
    )
    clique = dataclasses.replace(clique, daemons=daemons)
    for key, value in (annotations or {}).items():
        clique = clique.with_annotation(key, value)
    return clique


def test_the_note_names_the_lost_peers_and_is_written_only_when_it_changes() -> None:
    key = f"{names.LOST_PEERS_ANNOTATION_PREFIX}0"
    note = cliqueentry.lost_peers_note(_clique(), ME, {1: "2026-12-02T05:00:00Z"})
    assert note is not None and note[0] == key and note[1] is not None
    assert json.loads(note[1]) == {
        "node": "n0",
        "ip": "10.0.0.1",
        "lost": {"n1": "2026-12-02T05:00:00Z"},
    }
    written = _clique({key: note[1]})
    assert cliqueentry.lost_peers_note(written, ME, {1: "2026-12-02T05:00:00Z"}) is None
    assert cliqueentry.lost_peers_note(written, ME, {}) == (key, None)
    assert cliqueentry.lost_peers_note(_clique(), ME, {}) is None
    assert cliqueentry.lost_peers_note(_clique(), ME, {5: "x"}) is None  # not in the clique
