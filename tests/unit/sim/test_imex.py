"""The simulated nvidia-imex / nvidia-imex-ctl, run as real processes on loopback addresses."""

from __future__ import annotations

import fcntl
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from compute_domains.sim import imex_report
from compute_domains.sim.imex_wire import Link

# Every test runs real simulated IMEX processes, and each ctl query is a Python start-up: 0.4-3 s
# alone, several times that on a loaded 2-core machine.
pytestmark = pytest.mark.slow_unit(8, "real IMEX processes; each ctl query is a Python start-up")

IPS = ("127.0.0.11", "127.0.0.12", "127.0.0.13")
NO_MATCH = "No matching network interface found for any IP addresses in the node configuration file"


def _free_port(ips: tuple[str, ...]) -> int:
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((ips[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for ip in ips:
                with socket.socket() as other:
                    other.bind((ip, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port")


def wait_for(what: str, check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def holds_for(seconds: float, check: Callable[[], bool]) -> None:
    """Assert ``check`` stays true for ``seconds`` (an absence can only be watched for a while)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check()
        time.sleep(0.1)


def _link(sim: Sim, node: int, peer: int) -> str:
    """Node ``node``'s view of its connection to ``peer``."""
    return str(sim.domain(node)["nodes"][str(node)]["connections"][str(peer)]["status"])


class Sim:
    """Simulated IMEX nodes sharing a nodes file; each has its own config, hosts file and log."""

    def __init__(self, tmp: Path, nodes: list[str], ips: tuple[str, ...] = IPS) -> None:
        self.tmp = tmp
        self.ips = ips
        self.port = _free_port(ips)
        self.cmd_port = _free_port(ips)
        self.nodes_file = tmp / "nodes.cfg"
        self.nodes_file.write_text("".join(f"{n}\n" for n in nodes))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.all_procs: list[subprocess.Popen[bytes]] = []
        for i in range(len(ips)):
            self.write_config(i)
            self.hosts(i).write_text(
                "127.0.0.1\tlocalhost\n"
                + "".join(f"{a}\tcompute-domain-daemon-{k:04d}\n" for k, a in enumerate(ips))
            )

    def cfg(self, i: int) -> Path:
        return self.tmp / f"imexd-{i}.cfg"

    def hosts(self, i: int) -> Path:
        return self.tmp / f"hosts-{i}"

    def log(self, i: int) -> Path:
        return self.tmp / f"imex-{i}.log"

    def write_config(self, i: int, nodes_file: Path | None = None, **extra: str) -> None:
        lines = {
            "LOG_FILE_NAME": "",
            "DAEMONIZE": "0",
            "SERVER_PORT": str(self.port),
            "IMEX_NODE_CONFIG_FILE": str(nodes_file or self.nodes_file),
            "IMEX_CMD_ENABLED": "1",
            "IMEX_CMD_BIND_INTERFACE_IP": self.ips[i],
            "IMEX_CMD_PORT": str(self.cmd_port),
            **extra,
        }
        self.cfg(i).write_text("".join(f"{k}={v}\n" for k, v in lines.items()))

    def start(self, i: int, *flags: str, local: str | None = None) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "compute_domains.sim.imex_main", "imex", "-c"]
        argv += [str(self.cfg(i)), "--hosts-file", str(self.hosts(i))]
        argv += ["--local-address", local or self.ips[i], *flags]
        with self.log(i).open("ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=log)
        self.procs[i] = proc
        self.all_procs.append(proc)
        return proc

    def start_all(self) -> None:
        for i in range(len(self.ips)):
            self.start(i)
        for i in range(len(self.ips)):
            wait_for(f"node {i} READY", lambda i=i: self.query(i) == "READY\n")

    def ctl(self, i: int, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "compute_domains.sim.imex_main", "ctl"]
        return subprocess.run(
            [*argv, "-c", str(self.cfg(i)), *args],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )

    def query(self, i: int) -> str:
        done = self.ctl(i, "-q", "-t", "2000")
        return done.stdout + done.stderr

    def domain(self, i: int) -> dict[str, Any]:
        done = self.ctl(i, "-N", "-j", "-t", "5000")
        assert done.returncode == 0, done.stderr
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc

    def domain_is(self, i: int, status: str) -> bool:
        return self.domain(i)["status"] == status

    def log_text(self, i: int) -> str:
        return self.log(i).read_text()

    def stop(self, i: int, sig: int = signal.SIGTERM) -> int:
        proc = self.procs[i]
        proc.send_signal(sig)
        return proc.wait(timeout=10)

    def close(self) -> None:
        for proc in self.all_procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator[Callable[..., Sim]]:
    sims: list[Sim] = []

    def make(nodes: list[str] | None = None, ips: tuple[str, ...] = IPS) -> Sim:
        folder = tmp_path / f"sim{len(sims)}"
        folder.mkdir()
        sim = Sim(folder, list(nodes or ips), ips)
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        sim.close()


@pytest.fixture
def sim(sim_factory: Callable[..., Sim]) -> Sim:
    return sim_factory()


def test_three_nodes_are_ready_and_the_domain_comes_up(sim: Sim) -> None:
    sim.start_all()
    for i in range(3):
        assert sim.query(i) == "READY\n"
    wait_for("domain UP", lambda: sim.domain_is(0, "UP"))
    doc = sim.domain(1)
    assert list(doc) == ["nodes", "timestamp", "status"]
    assert doc["nodes"]["2"]["host"] == IPS[2]
    assert doc["nodes"]["2"]["connections"]["0"]["status"] == "CONNECTED"
    text = sim.ctl(2, "-N", "-t", "5000").stdout
    assert "Node #2   * 127.0.0.13 *" in text
    assert "       1        C   C   C" in text
    assert text.endswith("Domain State: UP\n")
    assert "Connection established to node 1 with ip address 127.0.0.12." in sim.log_text(0)


def test_a_stopped_peer_degrades_the_domain_and_its_return_restores_it(sim: Sim) -> None:
    sim.start_all()
    wait_for("domain UP", lambda: sim.domain_is(0, "UP"))
    assert sim.stop(2) == 0
    assert sim.query(2) != "READY\n"
    wait_for("domain DEGRADED", lambda: sim.domain_is(0, "DEGRADED"))
    doc = sim.domain(0)
    assert doc["nodes"]["2"]["status"] == "UNAVAILABLE"
    assert doc["nodes"]["2"]["connections"]["0"]["status"] == "INVALID"
    assert doc["nodes"]["0"]["connections"]["2"]["status"] == "DISCONNECTED"
    assert sim.query(0) == "READY\n"  # local readiness does not depend on peers
    assert "Received notification of shutdown from node 2 - 127.0.0.13" in sim.log_text(0)
    sim.start(2)
    wait_for("domain UP again", lambda: sim.domain_is(0, "UP"))
    assert "reconnected as a new instance" in sim.log_text(1)


def test_a_second_instance_on_the_same_address_fails_with_address_in_use(sim: Sim) -> None:
    sim.start(0)
    wait_for("node 0 READY", lambda: sim.query(0) == "READY\n")
    second = sim.start(0)
    assert second.wait(timeout=10) == 1
    assert f"Failed to bind to {IPS[0]}:{sim.port}: Address already in use" in sim.log_text(0)
    assert sim.query(0) == "READY\n"


def test_no_local_address_in_the_nodes_file_is_a_start_up_error(sim: Sim) -> None:
    proc = sim.start(0, local="127.0.0.99")
    assert proc.wait(timeout=10) == 1
    assert "[ERROR] [tid " in sim.log_text(0)
    assert f"{NO_MATCH} {sim.nodes_file}." in sim.log_text(0)


def test_sigusr1_reconnects_at_most_once_per_five_seconds(sim_factory: Callable[..., Sim]) -> None:
    sim = sim_factory(ips=IPS[:1])
    proc = sim.start(0)
    wait_for("domain UP", lambda: sim.domain_is(0, "UP"))
    proc.send_signal(signal.SIGUSR1)
    # Handled before the second is sent: two pending SIGUSR1s would merge into one delivery.
    wait_for("first SIGUSR1 handled", lambda: "SIGUSR1 received" in sim.log_text(0))
    proc.send_signal(signal.SIGUSR1)
    wait_for("reconnect", lambda: "Number of times connected: 2" in sim.log_text(0))
    wait_for("ignored", lambda: "ignoring it" in sim.log_text(0))
    log = sim.log_text(0)
    assert log.count("SIGUSR1 received: re-establishing all outgoing connections") == 1
    assert "Number of times connected: 3" not in log
    assert "Identified this node as ID 0" in log and log.count("Identified this node") == 1
    assert proc.poll() is None and sim.query(0) == "READY\n"


def test_host_names_resolve_through_the_hosts_file_and_sigusr1_re_resolves(
    sim_factory: Callable[..., Sim],
) -> None:
    names = ["compute-domain-daemon-0000", "compute-domain-daemon-0001"]
    sim = sim_factory(names, IPS[:2])
    sim.hosts(0).write_text(f"{IPS[0]}\t{names[0]}\n127.0.0.14\t{names[1]}\n")  # stale entry
    sim.start_all()
    log = sim.log_text(1)
    assert f"Treating node config entry '{names[0]}' as a host name." in log
    assert f"Identified this node as ID 1, using bind address of '{names[1]}'" in log
    # Node 1 reaching node 0 shows both are up and linking; node 0's own link to node 1 still
    # goes to the stale address, so it never connects, however long it keeps trying.
    wait_for("node 1 linked to node 0", lambda: _link(sim, 1, 0) == "CONNECTED")
    holds_for(1.0, lambda: _link(sim, 0, 1) == "NEVER_CONNECTED")
    sim.hosts(0).write_text(f"{IPS[0]}\t{names[0]}\n{IPS[1]}\t{names[1]}\n")
    sim.procs[0].send_signal(signal.SIGUSR1)
    wait_for("domain UP", lambda: sim.domain_is(0, "UP"))
    assert f"Connection established to node 1 with address {names[1]}." in sim.log_text(0)


def test_a_different_node_map_disables_the_link(sim_factory: Callable[..., Sim]) -> None:
    sim = sim_factory(ips=IPS[:2])
    other = sim.tmp / "other-nodes.cfg"
    other.write_text(f"{IPS[0]}\n{IPS[1]}\n{IPS[2]}\n")
    sim.write_config(1, nodes_file=other)
    sim.start_all()
    wait_for("mismatch", lambda: "Node configuration mapping mismatch" in sim.log_text(0))
    text = sim.ctl(0, "-N", "-t", "5000").stdout
    assert "       0        C   !M!" in text
    assert "Domain State: DEGRADED" in text


def test_an_imex_session_held_elsewhere_refuses_start(sim: Sim) -> None:
    session = sim.tmp / "session.lock"
    with session.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = sim.start(0, "--session-file", str(session))
        assert proc.wait(timeout=10) == 1
    assert "[ERROR]" in sim.log_text(0) and "NV_ERR_IN_USE Failed to allocate Imex session" in (
        sim.log_text(0)
    )
    sim.write_config(1, SIM_FAULT_SESSION_IN_USE="1")
    assert sim.start(1).wait(timeout=10) == 1
    assert "NV_ERR_IN_USE" in sim.log_text(1)


def test_fault_flags_drop_a_link_and_hang_the_daemon(sim_factory: Callable[..., Sim]) -> None:
    sim = sim_factory(ips=IPS[:2])
    faults = sim.tmp / "faults"
    faults.mkdir()
    sim.start(0, "--fault-dir", str(faults))
    sim.start(1)
    wait_for("domain UP", lambda: sim.domain_is(0, "UP"))
    (faults / "drop-link-1").touch()
    sim.procs[0].send_signal(signal.SIGHUP)
    wait_for("link dropped", lambda: sim.domain_is(0, "DEGRADED"))
    assert sim.domain(1)["nodes"]["0"]["connections"]["1"]["status"] == "RECOVERING"
    (faults / "drop-link-1").unlink()
    sim.procs[0].send_signal(signal.SIGHUP)
    wait_for("link back", lambda: sim.domain_is(0, "UP"))
    (faults / "hang").touch()
    sim.procs[0].send_signal(signal.SIGHUP)
    # The third SIGHUP's line is written after the flags were re-read (same handler).
    wait_for("hang flag read", lambda: sim.log_text(0).count("SIGHUP received") == 3)
    assert sim.ctl(0, "-q", "-t", "500").returncode == 1
    sim.procs[0].send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        sim.procs[0].wait(timeout=1.0)
    assert sim.stop(0, signal.SIGKILL) == -signal.SIGKILL


def test_ctl_without_a_daemon_reports_the_domain_down(sim: Sim) -> None:
    done = sim.ctl(0, "-q", "-t", "1000")
    assert done.returncode == 1 and "READY" not in done.stdout
    assert "Connection refused" in done.stderr
    doc = json.loads(sim.ctl(0, "-N", "-j", "-t", "1000").stdout)
    assert doc["status"] == "DOWN"
    assert {n["status"] for n in doc["nodes"].values()} == {"UNAVAILABLE"}


def test_ctl_reports_an_unreadable_node_config(sim: Sim) -> None:
    sim.nodes_file.unlink()
    done = sim.ctl(0, "-N")
    assert done.returncode == 255
    assert "Failed to read node configuration file" in done.stdout + done.stderr
    assert sim.ctl(0, "-q").returncode == 1


def _row(node: int, status: str = "READY", **links: Link) -> imex_report.NodeRow:
    connections = {int(k[1:]): v for k, v in links.items()}
    return imex_report.NodeRow(
        node_id=node,
        host=f"172.31.48.{81 + node}",
        status=status,
        version="570.172",
        connections=connections,
    )


def test_text_report_matches_the_real_layout() -> None:
    rows = [
        _row(0, c0=Link.CONNECTED, c1=Link.CONNECTED),
        _row(1, c0=Link.CONNECTED, c1=Link.CONNECTED),
    ]
    text = imex_report.format_text(
        rows, local_id=None, timestamp="5/4/2026 06:08:10.580", show_host_names=False
    )
    assert text == imex_report.LEGEND + (
        "\n"
        "5/4/2026 06:08:10.580\n"
        "Nodes:\n"
        "Node #0   - 172.31.48.81    - READY                - Version: 570.172\n"
        "Node #1   - 172.31.48.82    - READY                - Version: 570.172\n"
        "\n"
        " Nodes From\\To  0   1\n"
        "       0        C   C\n"
        "       1        C   C\n"
        "\n"
        "Domain State: UP\n"
    )


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([], "DOWN"),
        ([imex_report.NodeRow.unavailable(0, "a")], "DOWN"),
        ([_row(0, c0=Link.CONNECTED)], "UP"),
        ([_row(0, c0=Link.CONNECTED), imex_report.NodeRow.unavailable(1, "b")], "DEGRADED"),
        ([_row(0, c0=Link.RECOVERING)], "DEGRADED"),
        ([_row(0, status="INITIALIZING", c0=Link.CONNECTED)], "DEGRADED"),
    ],
    ids=["no-nodes", "all-unavailable", "all-connected", "peer-down", "link-lost", "not-ready"],
)
def test_domain_status(rows: list[imex_report.NodeRow], expected: str) -> None:
    assert imex_report.domain_status(rows) == expected
