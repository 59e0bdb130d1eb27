"""Two IMEX domains on one network: an address reused by another domain's IMEX (upstream #1447).

Domain A runs on ``REUSED`` and ``OLD_PEER``. A's IMEX on ``REUSED`` stops, and domain B's IMEX
starts on that same address (a resident agent's pod keeps its IP from one ComputeDomain to the
next), with its peer on ``NEW_PEER``. Then A's IMEX on ``OLD_PEER`` stops: its shutdown message goes
to every peer address it has, ``REUSED`` among them (its hosts file still maps A's node 0 there:
a view that lags, the condition #1447 names).

* NVIDIA's names (``compute-domain-daemon-%04d``, one nodes file for every domain): B's IMEX on
  ``REUSED`` takes the message for one of its own, and its link to its node 1 (B's peer, which
  never stopped) goes down, with the two lines the real daemon logged in #1447.
* The daemon's per-domain names (``dnsnames`` with each CD's UID): the node maps differ, the
  message is dropped and logged, and B's domain stays UP with its link to node 1 never lost.

The second case fails without the per-domain infix (both domains then list the same names).
The daemons run in-process (``ImexDaemon``), stopped as by SIGTERM.
"""

from __future__ import annotations

import asyncio
import io
import json
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from compute_domains.daemon import dnsnames
from compute_domains.sim import imex_config, imex_daemon, imex_inproc
from tests.unit.sim.test_imex import _free_port

pytestmark = pytest.mark.slow_unit(8, "four in-process IMEX daemons start and stop in turn")

REUSED, OLD_PEER, NEW_PEER = "127.0.0.41", "127.0.0.42", "127.0.0.43"
UID_A = "0b9e2f8c-5a41-4d2e-9b1c-aaaaaaaaaaaa"
UID_B = "7c3d1e6f-2b58-4a9d-8e7f-bbbbbbbbbbbb"


class _Log(io.StringIO):
    """A daemon's log stream that stays readable after the daemon closed it."""

    def close(self) -> None:
        pass


class Node:
    """One IMEX of one domain: its config, nodes file, hosts file and log."""

    def __init__(self, folder: Path, ip: str, names: list[str], peers: tuple[str, ...]) -> None:
        folder.mkdir()
        self.ip = ip
        self.cfg = folder / "imexd.cfg"
        self.hosts = folder / "hosts"
        self.log = _Log()
        (folder / "nodes.cfg").write_text("".join(f"{n}\n" for n in names))
        self.hosts.write_text("".join(f"{a}\t{n}\n" for a, n in zip(peers, names, strict=True)))
        self.task: asyncio.Task[int] | None = None
        self.daemon: imex_daemon.ImexDaemon | None = None
        self._folder = folder

    def configure(self, port: int, cmd_port: int) -> None:
        self.cfg.write_text(
            f"LOG_FILE_NAME=\nSERVER_PORT={port}\n"
            f"IMEX_NODE_CONFIG_FILE={self._folder / 'nodes.cfg'}\n"
            f"IMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP={self.ip}\nIMEX_CMD_PORT={cmd_port}\n"
            "IMEX_NODE_DISCONNECTED_GRACE_TIME=0\n"
        )

    def start(self) -> None:
        options = imex_config.ImexOptions(
            config_path=self.cfg, hosts_file=self.hosts, local_addresses=(self.ip,)
        )
        self.daemon = imex_daemon.ImexDaemon(options, stream=self.log, own_signals=False)
        self.task = asyncio.create_task(self.daemon.run())

    async def stop(self) -> None:
        assert self.daemon is not None and self.task is not None
        await until(lambda: self.daemon is not None and self.daemon.deliver(signal.SIGTERM))
        assert await asyncio.wait_for(self.task, 10) == 0

    async def domain(self) -> dict[str, Any]:
        """``nvidia-imex-ctl -N -j`` against this node, names resolved through its hosts file."""
        hosts = self.hosts
        launcher = imex_inproc.InProcessImex(
            lambda inside: hosts if inside == Path("/etc/hosts") else inside
        )
        rc, text = await launcher.run(["nvidia-imex-ctl", "-c", str(self.cfg), "-N", "-j"], 5.0)
        assert rc == 0, text
        doc: dict[str, Any] = json.loads(text)
        return doc

    async def link(self, node: int, peer: int) -> str:
        return str((await self.domain())["nodes"][str(node)]["connections"][str(peer)]["status"])

    def text(self) -> str:
        return self.log.getvalue()


async def until(check: Callable[[], bool], what: str = "condition", timeout: float = 10) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def until_async(check: Callable[[], Any], what: str, timeout: float = 10) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not await check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


@pytest.fixture
async def made(tmp_path: Path) -> AsyncIterator[Callable[[str, str], dict[str, Node]]]:
    ips = (REUSED, OLD_PEER, NEW_PEER)
    port, cmd_port = _free_port(ips), _free_port(ips)
    nodes: list[Node] = []

    def make(domain_a: str, domain_b: str) -> dict[str, Node]:
        """A's and B's nodes, named as the daemon names IMEX domains ``domain_a``/``domain_b``."""
        a_names = dnsnames.static_node_names(2, domain_a)
        b_names = dnsnames.static_node_names(2, domain_b)
        made = {
            "A0": Node(tmp_path / "a0", REUSED, a_names, (REUSED, OLD_PEER)),
            "A1": Node(tmp_path / "a1", OLD_PEER, a_names, (REUSED, OLD_PEER)),
            "B0": Node(tmp_path / "b0", REUSED, b_names, (REUSED, NEW_PEER)),
            "B1": Node(tmp_path / "b1", NEW_PEER, b_names, (REUSED, NEW_PEER)),
        }
        for node in made.values():
            node.configure(port, cmd_port)
        nodes.extend(made.values())
        return made

    yield make
    for node in nodes:
        if node.task is not None and not node.task.done():
            node.task.cancel()
            await asyncio.gather(node.task, return_exceptions=True)


async def _reuse_then_old_peer_stops(n: dict[str, Node]) -> None:
    """A up; A0 leaves; B up on A0's address; then A1 stops (its notice goes to ``REUSED``)."""
    n["A0"].start()
    n["A1"].start()
    await until_async(lambda: _linked(n["A1"], 1, 0), "A's node 1 linked to its node 0")
    await n["A0"].stop()
    n["B0"].start()
    n["B1"].start()
    await until_async(lambda: _up(n["B0"]), "B's domain UP")
    assert "Number of times connected: 1" in n["B0"].text()
    await n["A1"].stop()


async def _linked(node: Node, src: int, dst: int) -> bool:
    return await node.link(src, dst) == "CONNECTED"


async def _up(node: Node) -> bool:
    return (await node.domain())["status"] == "UP"


async def test_with_nvidias_names_an_old_domains_shutdown_breaks_the_new_one(
    made: Callable[[str, str], dict[str, Node]],
) -> None:
    n = made("", "")
    await _reuse_then_old_peer_stops(n)
    b0 = n["B0"]
    name_1 = dnsnames.dns_name(1)
    await until(
        lambda: f"Received notification of shutdown from node 1 - {name_1}" in b0.text(),
        "B's node 0 taking A's node 1's shutdown for its own node 1's",
    )
    await until(lambda: "Node disconnect event detected for node 1" in b0.text(), "the drop")
    assert "of another IMEX domain" not in b0.text()
    assert n["B1"].task is not None and not n["B1"].task.done()  # B's node 1 never stopped
    # Its link comes back at the next attempt (node 1 is still there): the damage was the
    # clean-up of everything imported from node 1.
    await until(lambda: "Number of times connected: 2" in b0.text(), "the link re-made")


async def test_with_per_domain_names_the_old_domains_shutdown_is_dropped(
    made: Callable[[str, str], dict[str, Node]],
) -> None:
    n = made(UID_A, UID_B)
    await _reuse_then_old_peer_stops(n)
    b0 = n["B0"]
    dropped = f"Dropped a shutdown message from node 1 ({OLD_PEER}) of another IMEX domain"
    await until(
        lambda: dropped in b0.text() or "Received notification of shutdown" in b0.text(),
        "B's node 0 getting A's node 1's shutdown",
    )
    assert dropped in b0.text(), b0.text()
    assert "Received notification of shutdown" not in b0.text()
    assert "Node disconnect event detected" not in b0.text()
    assert await _up(b0) and await b0.link(0, 1) == "CONNECTED"
    assert "Number of times connected: 2" not in b0.text()
