"""`cdctl sim control-plane restart|pause` as a user runs them, on a bare sim of real binaries.

The supervisor must not take a drill for a crash: after each the sim is still ``ready``, its
record names the new pid, the API server answers on the same port with the same data. A pause
really freezes etcd (a write waits for it) and always ends: on time, at once when the command
is interrupted (Ctrl-C), and when the command is killed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compute_domains.containers import procs
from compute_domains.sim import toolchain

NAME = "drills"


def _cdctl(*args: str) -> list[str]:
    return [sys.executable, "-m", "compute_domains", *args]


@pytest.fixture(scope="module")
def home(toolset: toolchain.Toolset) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cddrill-", dir="/tmp"))
    env = {**os.environ, "CD_SIM_HOME": str(path)}
    try:
        subprocess.run(
            _cdctl("sim", "up", "--racks", "0", "--name", NAME),
            env=env,
            capture_output=True,
            timeout=240,
            check=True,
        )
        yield path
    finally:
        subprocess.run(
            _cdctl("sim", "down", "--name", NAME),
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        shutil.rmtree(path, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "CD_SIM_HOME": str(home)}


def _run(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        _cdctl(*args), env=_env(home), capture_output=True, text=True, timeout=timeout, check=False
    )
    if res.returncode != 0:
        pytest.fail(f"cdctl {' '.join(args)} failed ({res.returncode}):\n{res.stdout}{res.stderr}")
    return res


def _pids(home: Path) -> dict[str, int]:
    doc = json.loads((home / "sims" / NAME / "controlplane" / "endpoints.json").read_text())
    return {k: int(v) for k, v in doc["pids"].items()}


def _status(home: Path) -> dict[str, object]:
    doc: dict[str, object] = json.loads(
        _run(home, "sim", "status", "--name", NAME, "-o", "json").stdout
    )
    return doc


def _kubectl(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    kubeconfig = home / "sims" / NAME / "controlplane" / "kubeconfig" / "admin.yaml"
    bin_dir = json.loads((home / "sims" / NAME / "state.json").read_text())["bin_dir"]
    return subprocess.run(
        [f"{bin_dir}/kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


def _until(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.05)


def _ready_and_whole(home: Path) -> None:
    status = _status(home)
    assert status["running"] is True and status["phase"] == "ready", status
    components = status["components"]
    assert isinstance(components, dict) and all(components.values()), status
    assert status["paused"] == [], status


def test_restart_the_api_server_cleanly_and_by_a_crash(home: Path) -> None:
    api = _status(home)["apiServer"]
    _kubectl(home, "create", "configmap", "before-restart", "--from-literal=k=v")
    for extra, sig in (((), "SIGTERM"), (("--kill", "--down", "1"), "SIGKILL")):
        old = _pids(home)["kube-apiserver"]
        out = _run(home, "sim", "control-plane", "restart", "apiserver", "--name", NAME, *extra)
        m = re.fullmatch(
            rf"kube-apiserver restarted: down ([\d.]+)s \({sig}, pid (\d+) -> (\d+)\); "
            r"healthy again\n",
            out.stdout,
        )
        assert m, out.stdout
        down, was, now = float(m[1]), int(m[2]), int(m[3])
        assert was == old and now != old and not procs.pid_alive(old)
        assert down >= (1.0 if "--down" in extra else 0.0)
        assert _pids(home)["kube-apiserver"] == now  # `sim status` and the cleanup see it
        _ready_and_whole(home)
        assert _status(home)["apiServer"] == api  # same address and port
        got = _kubectl(home, "get", "configmap", "before-restart", "-o", "jsonpath={.data.k}")
        assert got.stdout == "v"  # etcd kept its data, the certificates still fit


def test_pause_etcd_freezes_writes_then_continues(home: Path) -> None:
    etcd = _pids(home)["etcd"]
    pause = subprocess.Popen(
        _cdctl("sim", "control-plane", "pause", "etcd", "--seconds", "3", "--name", NAME),
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _until(lambda: procs.stopped(etcd), "etcd stopped")
        assert _status(home)["paused"] == ["etcd"]
        t0 = time.monotonic()
        _kubectl(home, "create", "configmap", "during-pause", "--from-literal=k=v")
        waited = time.monotonic() - t0
        out, err = pause.communicate(timeout=60)
    finally:
        pause.kill()
        pause.wait()
    assert pause.returncode == 0, err
    assert "etcd paused (SIGSTOP) for 3s" in err
    m = re.fullmatch(r"etcd continued \(SIGCONT\) after ([\d.]+)s\n", out)
    assert m and 3.0 <= float(m[1]) < 10, out
    assert waited > 1.0, f"a write went through a paused etcd in {waited:.2f}s"
    assert not procs.stopped(etcd)
    _ready_and_whole(home)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("how", ["interrupt", "kill"])
def test_a_pause_ends_at_once_when_its_command_ends(home: Path, how: str) -> None:
    etcd = _pids(home)["etcd"]
    pause = subprocess.Popen(
        _cdctl("sim", "control-plane", "pause", "etcd", "--seconds", "300", "--name", NAME),
        env=_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as in a terminal: a runner started as a shell's background job ignores SIGINT,
        # and a child inherits that (Python then installs no KeyboardInterrupt handler).
        preexec_fn=_default_sigint,
    )
    with pause:  # its pipes are closed however this ends
        try:
            _until(lambda: procs.stopped(etcd), "etcd stopped")
            t0 = time.monotonic()
            pause.send_signal(signal.SIGINT if how == "interrupt" else signal.SIGKILL)
            _until(lambda: not procs.stopped(etcd), "etcd continued", timeout=15)
            continued = time.monotonic() - t0
            out, err = pause.communicate(timeout=30)
        except AssertionError as failed:
            pause.kill()
            said = pause.communicate(timeout=30)
            raise AssertionError(f"{failed}; the pause command said {said}") from None
        finally:
            pause.kill()
            pause.wait()
    assert continued < 15
    if how == "interrupt":
        assert pause.returncode == 130, (out, err)
        assert re.fullmatch(r"etcd continued \(SIGCONT\) after [\d.]+s \(interrupted\)\n", out)
    _ready_and_whole(home)
