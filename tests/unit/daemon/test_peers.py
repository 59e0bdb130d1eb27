"""Peer changes reach IMEX: hosts block, first start, SIGUSR1 paced past IMEX's 5 s window."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from compute_domains.daemon import dnsnames, peers
from compute_domains.daemon.config import PeerSettings
from compute_domains.infra import logs

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    ("history", "now", "pid", "expected"),
    [
        ([], 100.0, 1, 0.0),
        ([(100.0, 1)], 101.5, 1, 3.5),
        ([(100.0, 1)], 105.0, 1, 0.0),
        ([(100.0, 1)], 109.0, 1, 0.0),
        ([(100.0, 1)], 101.0, 2, 0.0),
        ([(100.0, 1), (106.0, 1)], 107.0, 1, 4.0),
    ],
    ids=["first", "inside-window", "window-edge", "after-window", "new-process", "latest-counts"],
)
def test_pacer_waits_out_imex_reload_window(
    history: list[tuple[float, int]], now: float, pid: int, expected: float
) -> None:
    pacer = peers.ReloadPacer(5.0)
    for at, sent_pid in history:
        pacer.sent(at, sent_pid)
    assert pacer.delay(now, pid) == pytest.approx(expected)


class FakeImex:
    """Stands in for the supervisor: records starts and reloads with the loop time."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.starts = 0
        self.reload_times: list[float] = []
        self.hosts_at_reload: list[str] = []
        self.hosts: Path | None = None

    async def start(self) -> bool:
        self.starts += 1
        self.pid = 4242
        return True

    def reload(self) -> bool:
        if self.pid is None:
            return False
        self.reload_times.append(asyncio.get_running_loop().time())
        if self.hosts is not None:
            self.hosts_at_reload.append(self.hosts.read_text())
        return True


INTERVAL = 0.4


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1\tlocalhost\n10.1.1.1\tmy-pod\n")
    return path


@pytest.fixture
async def running(hosts: Path) -> AsyncIterator[tuple[peers.PeerUpdater, FakeImex]]:
    imex = FakeImex()
    imex.hosts = hosts
    settings = PeerSettings(hosts_file=hosts, reload_interval=INTERVAL, reload_margin=0.02)
    updater = peers.PeerUpdater(settings, imex, max_nodes=4)
    task = asyncio.create_task(updater.run())
    yield updater, imex
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _settle(seconds: float = 0.1) -> None:
    await asyncio.sleep(seconds)


async def test_first_mapping_writes_hosts_and_starts_imex_without_a_reload(
    running: tuple[peers.PeerUpdater, FakeImex], hosts: Path
) -> None:
    updater, imex = running
    updater.update({0: "10.1.1.1"})
    await _settle()
    assert imex.starts == 1
    assert imex.reload_times == []
    text = hosts.read_text()
    assert text.startswith("127.0.0.1\tlocalhost\n10.1.1.1\tmy-pod\n")
    assert f"10.1.1.1\t{dnsnames.dns_name(0)}" in text


async def test_a_changed_peer_set_sends_one_reload_and_never_restarts(
    running: tuple[peers.PeerUpdater, FakeImex], hosts: Path
) -> None:
    updater, imex = running
    updater.update({0: "10.1.1.1"})
    await _settle()
    updater.update({0: "10.1.1.1", 1: "10.1.1.2"})
    await _settle()
    assert imex.starts == 1
    assert len(imex.reload_times) == 1
    assert f"10.1.1.2\t{dnsnames.dns_name(1)}" in imex.hosts_at_reload[0]


async def test_the_same_mapping_again_sends_nothing(
    running: tuple[peers.PeerUpdater, FakeImex],
) -> None:
    updater, imex = running
    updater.update({0: "10.1.1.1"})
    await _settle()
    updater.update({0: "10.1.1.1"})
    await _settle()
    assert imex.reload_times == []


async def test_changes_inside_the_window_coalesce_into_one_later_reload(
    running: tuple[peers.PeerUpdater, FakeImex], hosts: Path
) -> None:
    updater, imex = running
    updater.update({0: "10.1.1.1"})
    await _settle()
    updater.update({0: "10.1.1.1", 1: "10.1.1.2"})
    await _settle(0.05)
    assert len(imex.reload_times) == 1
    updater.update({0: "10.1.1.1", 1: "10.1.1.3"})
    await _settle(0.05)
    updater.update({0: "10.1.1.1", 1: "10.1.1.3", 2: "10.1.1.4"})
    await _settle(0.05)
    assert len(imex.reload_times) == 1, "a signal inside the window would be ignored by IMEX"
    await _settle(INTERVAL + 0.2)
    assert len(imex.reload_times) == 2
    assert imex.reload_times[1] - imex.reload_times[0] >= INTERVAL
    last = imex.hosts_at_reload[-1]
    assert "10.1.1.3" in last and "10.1.1.4" in last
    await _settle(INTERVAL + 0.1)
    assert len(imex.reload_times) == 2


async def test_no_reload_while_imex_is_down(
    running: tuple[peers.PeerUpdater, FakeImex],
) -> None:
    updater, imex = running
    updater.update({0: "10.1.1.1"})
    await _settle()
    imex.pid = None  # crashed, waiting out its restart backoff
    updater.update({0: "10.1.1.1", 1: "10.1.1.2"})
    await _settle()
    assert imex.reload_times == []
    imex.pid = 5000
    updater.update({0: "10.1.1.1", 1: "10.1.1.5"})
    await _settle()
    assert len(imex.reload_times) == 1


async def test_unfilled_slots_get_the_configured_address(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    imex = FakeImex()
    settings = PeerSettings(hosts_file=hosts, unfilled_address="192.0.2.1")
    updater = peers.PeerUpdater(settings, imex, max_nodes=3)
    task = asyncio.create_task(updater.run())
    try:
        updater.update({1: "10.1.1.1"})
        await _settle()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    lines = [ln for ln in hosts.read_text().splitlines() if not ln.startswith("#")]
    assert lines == [
        f"192.0.2.1\t{dnsnames.dns_name(0)}",
        f"10.1.1.1\t{dnsnames.dns_name(1)}",
        f"192.0.2.1\t{dnsnames.dns_name(2)}",
    ]


async def test_a_failing_first_start_propagates(tmp_path: Path) -> None:
    class Missing(FakeImex):
        async def start(self) -> bool:
            raise FileNotFoundError("nvidia-imex")

    updater = peers.PeerUpdater(PeerSettings(hosts_file=tmp_path / "hosts"), Missing(), max_nodes=2)
    task = asyncio.create_task(updater.run())
    updater.update({0: "10.1.1.1"})
    with pytest.raises(ExceptionGroup) as info:
        await asyncio.wait_for(task, 2)
    assert info.group_contains(FileNotFoundError)


async def test_waiting_for_peers_is_a_verbosity_1_line_in_nvidias_words(
    hosts: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # NVIDIA's daemon test: present at logVerbosity 6, absent at 0 (here V1: neither INFO nor
    # hidden at debug).
    settings = PeerSettings(hosts_file=hosts, reload_interval=INTERVAL, reload_margin=0.02)
    updater = peers.PeerUpdater(settings, FakeImex(), max_nodes=4)
    with caplog.at_level(logging.DEBUG, logger=peers.__name__):
        task = asyncio.create_task(updater.run())
        await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    waits = [r for r in caplog.records if "Wait for updated ComputeDomainDaemonInfo list" in r.msg]
    assert waits and {r.levelno for r in waits} == {logs.V1}
