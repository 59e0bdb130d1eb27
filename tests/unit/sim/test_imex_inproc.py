"""The IMEX stand-in behind a daemon's launcher, in-process (``sim.imex_inproc``)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from compute_domains.sim import imex_inproc
from tests.unit.sim.test_imex import _free_port

IPS = ("127.0.0.21", "127.0.0.22")


async def _lines_until(stream: asyncio.StreamReader, mark: str) -> str:
    seen: list[str] = []
    while True:
        raw = await asyncio.wait_for(stream.readline(), 5.0)
        assert raw, f"EOF before {mark!r}: {''.join(seen)}"
        seen.append(raw.decode())
        if mark in seen[-1]:
            return "".join(seen)


class Node:
    """One node's IMEX files, as its daemon container sees them: ``/imexd`` (the domain
    folder, whose config names ``/imexd/nodes.cfg``) and ``/etc/hosts``."""

    def __init__(self, tmp: Path, i: int, port: int, cmd_port: int) -> None:
        self.domain = tmp / f"domain-{i}"
        self.domain.mkdir()
        self.hosts = tmp / f"hosts-{i}"
        self.cfg = self.domain / "imexd.cfg"
        (self.domain / "nodes.cfg").write_text(
            "".join(f"compute-domain-daemon-{k:04d}\n" for k in range(len(IPS)))
        )
        self.hosts.write_text(
            "".join(f"{a}\tcompute-domain-daemon-{k:04d}\n" for k, a in enumerate(IPS))
        )
        self.cfg.write_text(
            f"LOG_FILE_NAME=\nSERVER_PORT={port}\nIMEX_NODE_CONFIG_FILE=/imexd/nodes.cfg\n"
            f"IMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP={IPS[i]}\nIMEX_CMD_PORT={cmd_port}\n"
        )
        self.launcher = imex_inproc.InProcessImex(self.host_path)

    def host_path(self, inside: Path) -> Path:
        """The container's mounts: ``/imexd`` and ``/etc/hosts``."""
        if inside == Path("/etc/hosts"):
            return self.hosts
        if inside.is_relative_to("/imexd"):
            return self.domain / inside.relative_to("/imexd")
        return inside

    async def query(self) -> tuple[int, str]:
        return await self.launcher.run(["nvidia-imex-ctl", "-c", str(self.cfg), "-q"], 3.0)


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[list[Node]]:
    port, cmd_port = _free_port(IPS), _free_port(IPS)
    yield [Node(tmp_path, i, port, cmd_port) for i in range(len(IPS))]


async def test_two_daemons_in_one_process_are_ready_reload_and_stop(nodes: list[Node]) -> None:
    children = [
        await n.launcher.spawn(
            ["nvidia-imex", "-c", str(n.cfg)], env=None, cwd=None, parent_death_signal=None
        )
        for n in nodes
    ]
    for child in children:
        assert child.stderr is not None
        # The nodes file its config names and its hosts file are the container's: both peers
        # resolve and connect.
        await _lines_until(child.stderr, "Connection established to node 1")
    for n in nodes:
        assert await n.query() == (0, "READY\n")
    children[0].send_signal(signal.SIGUSR1)
    assert children[0].stderr is not None
    await _lines_until(children[0].stderr, "SIGUSR1 received")
    for child in children:
        child.terminate()
        assert await child.wait() == 0
        assert child.stderr is not None
        rest = (await asyncio.wait_for(child.stderr.read(), 5.0)).decode()
        assert "IMEX daemon shut down." in rest
    with pytest.raises(ProcessLookupError):
        children[0].send_signal(signal.SIGTERM)
    rc, text = await nodes[0].query()
    assert rc != 0 and text != "READY\n"


async def test_a_killed_daemon_exits_with_sigkill_status(nodes: list[Node]) -> None:
    n = nodes[0]
    child = await n.launcher.spawn(
        ["/usr/bin/nvidia-imex", "-c", str(n.cfg)], env=None, cwd=None, parent_death_signal=None
    )
    assert child.stderr is not None
    await _lines_until(child.stderr, "Creating gRPC channels")
    child.kill()
    assert await child.wait() == -signal.SIGKILL


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        pytest.param(["nvidia-smi"], 127, id="another-program"),
        pytest.param(["nvidia-imex-ctl", "-c", "/nonexistent.cfg", "-n"], 2, id="not-q-or-N"),
        pytest.param(["nvidia-imex-ctl", "-c", "/nonexistent.cfg", "-N"], 1, id="N-no-config"),
        pytest.param(["nvidia-imex-ctl", "--bogus"], 2, id="usage-error"),
    ],
)
async def test_other_runs_fail_as_the_programs_would(argv: list[str], status: int) -> None:
    launcher = imex_inproc.InProcessImex(lambda inside: inside)
    rc, _ = await launcher.run(argv, 1.0)
    assert rc == status


async def test_spawning_another_program_is_a_missing_program() -> None:
    launcher = imex_inproc.InProcessImex(lambda inside: inside)
    with pytest.raises(FileNotFoundError):
        await launcher.spawn(["nvidia-smi"], env=None, cwd=None, parent_death_signal=None)


async def test_in_process_links_keep_alive_at_the_in_process_pace(nodes: list[Node]) -> None:
    """Issue 28: in-process daemons' links ping every ``IN_PROCESS_PING_INTERVAL`` seconds (one
    loop serves every node of a host: 1,152 nodes of shared IMEX pinging every second kept the
    host's loop busy); a launcher can still ask for the stand-in's own pace."""
    n = nodes[0]
    child = await n.launcher.spawn(
        ["nvidia-imex", "-c", str(n.cfg)], env=None, cwd=None, parent_death_signal=None
    )
    assert child.stderr is not None
    await _lines_until(child.stderr, "Connection established to node 0")
    links = child._daemon._links
    assert links and {(lk._ctx.ping_interval, lk._ctx.ping_timeout) for lk in links} == {
        (imex_inproc.IN_PROCESS_PING_INTERVAL, imex_inproc.IN_PROCESS_PING_TIMEOUT)
    }
    child.terminate()
    assert await child.wait() == 0
    paced = imex_inproc.InProcessImex(n.host_path, ping_interval=1.0, ping_timeout=4.0)
    again = await paced.spawn(
        ["nvidia-imex", "-c", str(n.cfg)], env=None, cwd=None, parent_death_signal=None
    )
    assert again.stderr is not None
    await _lines_until(again.stderr, "Connection established to node 0")
    assert {(lk._ctx.ping_interval, lk._ctx.ping_timeout) for lk in again._daemon._links} == {
        (1.0, 4.0)
    }
    again.terminate()
    assert await again.wait() == 0
