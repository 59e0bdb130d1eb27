"""`cdctl sim up | env | status | down` as a user runs them, on real binaries.

Runs next to the session's sim, so it also shows that control planes run side by side.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_domains.containers import procs
from compute_domains.sim import toolchain


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="cdcli-", dir="/tmp"))
    yield path
    # Whatever a failed assertion left running is stopped here, never leaked.
    for sim_dir in (path / "sims").glob("*"):
        subprocess.run(
            _cdctl("sim", "down", "--name", sim_dir.name),
            env=_env(path),
            capture_output=True,
            timeout=120,
            check=False,
        )
    shutil.rmtree(path, ignore_errors=True)


def _cdctl(*args: str) -> list[str]:
    return [sys.executable, "-m", "compute_domains", *args]


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["CD_SIM_HOME"] = str(home)
    return env


def _run(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        _cdctl(*args), env=_env(home), capture_output=True, text=True, timeout=300, check=False
    )
    if check and res.returncode != 0:
        pytest.fail(
            f"cdctl {' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}"
        )
    return res


def _status(home: Path, name: str) -> dict[str, object]:
    doc: dict[str, object] = json.loads(
        _run(home, "sim", "status", "--name", name, "-o", "json").stdout
    )
    return doc


def _wait_gone(pids: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while any(procs.pid_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"processes still alive: {pids}"
        time.sleep(0.1)


def test_up_env_status_raw_down(home: Path, toolset: toolchain.Toolset) -> None:
    up = _run(home, "sim", "up", "--racks", "0", "--name", "cli")
    kubeconfig = home / "sims" / "cli" / "controlplane" / "kubeconfig" / "admin.yaml"
    assert str(kubeconfig) in up.stdout
    assert "kubectl get nodes" in up.stdout

    again = _run(home, "sim", "up", "--racks", "0", "--name", "cli")
    assert "already running" in again.stderr

    exports = _run(home, "sim", "env", "--name", "cli").stdout.splitlines()
    assert exports[0] == f"export KUBECONFIG={kubeconfig}"
    bin_dir = exports[1].removeprefix("export PATH=").removesuffix(":$PATH")
    assert (Path(bin_dir) / "kubectl").exists() and (Path(bin_dir) / "helm").exists()

    raw = subprocess.run(
        [f"{bin_dir}/kubectl", "get", "--raw", "/apis/resource.k8s.io/v1"],
        env={**_env(home), "KUBECONFIG": str(kubeconfig)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    served = {r["name"] for r in json.loads(raw.stdout)["resources"]}
    assert {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"} <= served

    status = _status(home, "cli")
    assert status["running"] is True and status["phase"] == "ready"
    components = status["components"]
    assert isinstance(components, dict)
    assert set(components) == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    }
    assert all(components.values())
    pids = list(
        json.loads((home / "sims/cli/controlplane/endpoints.json").read_text())["pids"].values()
    )
    api = str(status["apiServer"])

    down = _run(home, "sim", "down", "--name", "cli")
    assert "stopped" in down.stdout
    _wait_gone(pids)
    assert not (home / "sims" / "cli").exists()
    port = int(api.rsplit(":", 1)[1])
    with socket.socket() as sock, pytest.raises(OSError):
        sock.connect(("127.0.0.1", port))
    assert "nothing to stop" in _run(home, "sim", "down", "--name", "cli").stdout


def test_killed_supervisor_leaves_no_process_and_next_up_cleans(
    home: Path, toolset: toolchain.Toolset
) -> None:
    _run(home, "sim", "up", "--racks", "0", "--name", "crash")
    state = json.loads((home / "sims/crash/state.json").read_text())
    pids = list(
        json.loads((home / "sims/crash/controlplane/endpoints.json").read_text())["pids"].values()
    )
    os.kill(state["supervisor_pid"], signal.SIGKILL)
    _wait_gone([state["supervisor_pid"], *pids])

    status = _status(home, "crash")
    assert status["running"] is False and status["stale"] is True

    up = _run(home, "sim", "up", "--racks", "0", "--name", "crash")
    assert "stale" in up.stderr
    assert _status(home, "crash")["running"] is True
    _run(home, "sim", "down", "--name", "crash")


def test_port_in_use_is_one_clear_error_and_nothing_runs(
    home: Path, toolset: toolchain.Toolset
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        res = _run(
            home,
            "sim",
            "up",
            "--racks",
            "0",
            "--name",
            "busy",
            "--api-port",
            str(port),
            check=False,
        )
    assert res.returncode == 1
    assert f"port 127.0.0.1:{port} is already in use" in res.stderr
    assert "Traceback" not in res.stderr
    status = _status(home, "busy")
    assert status["running"] is False


def test_env_of_missing_sim_says_how_to_start(home: Path) -> None:
    res = _run(home, "sim", "env", "--name", "nope", check=False)
    assert res.returncode == 1
    assert "cdctl sim up" in res.stderr
