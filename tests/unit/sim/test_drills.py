"""Control-plane fault drills: names, pause lengths, holding a process stopped, the socket's ops.

The socket tests serve ``control.ControlServer`` on a real Unix socket with a stand-in for the
control plane (``_Plane``: it records what it was asked and holds its pause until told), so
what is checked is the server's own part: dispatch, validation, and a pause that ends when its
client goes away or the server stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from compute_domains.cli import simcontrol
from compute_domains.containers import procs
from compute_domains.sim import control, drills, errors


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("apiserver", "kube-apiserver"),
        ("kube-apiserver", "kube-apiserver"),
        ("etcd", "etcd"),
        ("scheduler", "kube-scheduler"),
        ("controller-manager", "kube-controller-manager"),
        ("kube-controller-manager", "kube-controller-manager"),
    ],
)
def test_a_component_is_named_short_or_as_its_binary(given: str, meant: str) -> None:
    assert drills.component(given) == meant


def test_an_unknown_component_is_refused_with_the_choices() -> None:
    with pytest.raises(errors.SimError, match=r"no control-plane component 'kubelet'.*apiserver"):
        drills.component("kubelet")


@pytest.mark.parametrize("seconds", [0.1, 5, 600])
def test_pause_lengths_in_range(seconds: float) -> None:
    assert drills.check_pause(seconds) == float(seconds)


@pytest.mark.parametrize(
    ("seconds", "why"),
    [
        (0, "out of range"),
        (-1, "out of range"),
        (600.5, "out of range"),
        ("5", "must be a number"),
        (True, "must be a number"),
        (None, "must be a number"),
    ],
)
def test_pause_lengths_refused(seconds: Any, why: str) -> None:
    with pytest.raises(errors.SimError, match=why):
        drills.check_pause(seconds)


def test_a_restart_round_trips_through_its_answer() -> None:
    done = drills.Restarted(
        component="kube-apiserver", down_s=4.25, old_pid=10, pid=20, signal="SIGKILL"
    )
    assert drills.Restarted.from_doc(json.loads(json.dumps(done.to_doc()))) == done
    assert simcontrol.restarted_line(done) == (
        "kube-apiserver restarted: down 4.2s (SIGKILL, pid 10 -> 20); healthy again"
    )


@pytest.mark.parametrize(
    ("early", "interrupted", "tail"),
    [(False, False, ""), (True, True, " (interrupted)"), (True, False, " (its client went away)")],
)
def test_the_pause_line_says_why_it_ended(early: bool, interrupted: bool, tail: str) -> None:
    line = simcontrol.paused_line("etcd", 2.04, early=early, interrupted=interrupted)
    assert line == f"etcd continued (SIGCONT) after 2.0s{tail}"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


async def _until(check: Any) -> None:
    async with asyncio.timeout(1.5):
        while not check():
            await asyncio.sleep(0.01)


async def test_hold_stopped_stops_then_continues(sleeper: subprocess.Popen[bytes]) -> None:
    resume = asyncio.Event()
    held = asyncio.create_task(drills.hold_stopped(sleeper.pid, 30, resume))
    await _until(lambda: procs.stopped(sleeper.pid))
    resume.set()
    assert await held < 1.5
    assert not procs.stopped(sleeper.pid)


async def test_hold_stopped_times_out_on_its_own(sleeper: subprocess.Popen[bytes]) -> None:
    assert 0.2 <= await drills.hold_stopped(sleeper.pid, 0.2) < 1.5
    assert not procs.stopped(sleeper.pid)


async def test_a_cancelled_hold_still_continues_the_process(
    sleeper: subprocess.Popen[bytes],
) -> None:
    held = asyncio.create_task(drills.hold_stopped(sleeper.pid, 30))
    await _until(lambda: procs.stopped(sleeper.pid))
    held.cancel()
    with pytest.raises(asyncio.CancelledError):
        await held
    assert not procs.stopped(sleeper.pid)


class _Plane:
    """Stands in for ``ControlPlane``: records requests; a pause lasts until ``resume``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.pausing = asyncio.Event()
        self.pause_ended = asyncio.Event()

    async def restart(
        self, name: str, *, down_s: float = 0.0, kill: bool = False
    ) -> drills.Restarted:
        self.calls.append(("restart", name, down_s, kill))
        return drills.Restarted(component=name, down_s=1.5, old_pid=1, pid=2, signal="SIGTERM")

    async def pause(
        self, name: str, seconds: float, *, resume: asyncio.Event | None = None
    ) -> float:
        self.calls.append(("pause", name, seconds))
        assert resume is not None
        self.pausing.set()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(resume.wait(), seconds)
        finally:
            self.pause_ended.set()
        return 0.5


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Path, _Plane, asyncio.Task[None]]]:
    plane, path = _Plane(), tmp_path / "c.sock"
    task = asyncio.create_task(control.ControlServer(path, None, control_plane=plane).run())
    await _until(path.exists)
    yield path, plane, task
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_restart_reaches_the_control_plane_by_its_full_name(
    served: tuple[Path, _Plane, asyncio.Task[None]],
) -> None:
    path, plane, _ = served
    answer = await asyncio.to_thread(
        control.request, path, {"op": "restart", "component": "apiserver", "down": 2, "kill": True}
    )
    assert plane.calls == [("restart", "kube-apiserver", 2.0, True)]
    assert drills.Restarted.from_doc(answer).down_s == 1.5


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({"op": "restart", "component": "kubelet"}, "no control-plane component 'kubelet'"),
        ({"op": "restart", "component": "etcd", "down": -1}, "down time must be seconds"),
        ({"op": "pause", "component": "etcd", "seconds": 0}, "out of range"),
        ({"op": "pause", "component": "etcd"}, "must be a number"),
        ({"op": "stop", "node": "gb200-r0-n00"}, "this sim has no nodes"),
    ],
)
async def test_bad_drills_are_refused_with_a_reason(
    served: tuple[Path, _Plane, asyncio.Task[None]], payload: dict[str, Any], error: str
) -> None:
    path, plane, _ = served
    with pytest.raises(errors.SimError, match=error):
        await asyncio.to_thread(control.request, path, payload)
    assert plane.calls == []


async def test_a_node_hosts_socket_serves_no_drills(tmp_path: Path) -> None:
    path = tmp_path / "h.sock"
    task = asyncio.create_task(control.ControlServer(path, None).run())
    try:
        await _until(path.exists)
        with pytest.raises(errors.SimError, match="serves no control plane"):
            await asyncio.to_thread(
                control.request, path, {"op": "pause", "component": "etcd", "seconds": 1}
            )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _pause_request(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    sock.sendall(json.dumps({"op": "pause", "component": "etcd", "seconds": 60}).encode() + b"\n")
    return sock


async def test_a_pause_ends_early_when_its_client_half_closes_and_still_answers(
    served: tuple[Path, _Plane, asyncio.Task[None]],
) -> None:
    path, plane, _ = served
    sock = _pause_request(path)
    try:
        await asyncio.wait_for(plane.pausing.wait(), 1.5)
        sock.shutdown(socket.SHUT_WR)  # what an interrupted ``cdctl`` does
        await asyncio.wait_for(plane.pause_ended.wait(), 1.5)
        sock.settimeout(1.5)
        answer = json.loads(await asyncio.to_thread(sock.recv, 65536))
    finally:
        sock.close()
    assert answer == {"ok": {"component": "etcd", "pausedSeconds": 0.5, "early": True}}


async def test_a_pause_ends_when_its_client_is_gone(
    served: tuple[Path, _Plane, asyncio.Task[None]],
) -> None:
    path, plane, _ = served
    sock = _pause_request(path)
    await asyncio.wait_for(plane.pausing.wait(), 1.5)
    sock.close()  # a killed ``cdctl``
    await asyncio.wait_for(plane.pause_ended.wait(), 1.5)


async def test_a_pause_ends_when_the_server_stops(
    served: tuple[Path, _Plane, asyncio.Task[None]],
) -> None:
    path, plane, task = served
    sock = _pause_request(path)
    try:
        await asyncio.wait_for(plane.pausing.wait(), 1.5)
        task.cancel()
        await asyncio.wait_for(plane.pause_ended.wait(), 1.5)
    finally:
        sock.close()
