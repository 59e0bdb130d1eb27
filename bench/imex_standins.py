#!/usr/bin/env python3
"""CPU of the simulated ``nvidia-imex`` stand-in alone: N daemons forming one full-mesh domain.

Starts N stand-in daemons (``python -m compute_domains.sim.imex_main imex -c <cfg>``, as the
driver root's ``nvidia-imex`` wrapper does) with one shared nodes file of host names, a hosts
file mapping them to distinct loopback addresses (127.213.<N>.<k>) and, per daemon, the config
keys a ComputeDomain daemon renders (``IMEX_CMD_BIND_INTERFACE_IP`` = its "pod IP", no log file:
the log goes to stderr). It then asks every daemon's command port for its row (the ``-q`` query,
over a plain socket from this process) until every daemon is ``READY`` with every link ``C``,
and reports the daemons' CPU (utime + stime from /proc) at that moment, the wall time, and their
CPU over an idle period after it. No control plane; not part of CI.

Usage (from a worktree's root; ``--src`` picks whose stand-in runs, e.g. a base worktree's)::

    flock /tmp/cd-sim.lock .venv/bin/python bench/imex_standins.py --sizes 18,36 --idle 30
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER_PORT = 50000
CMD_PORT = 50005
_TICK = os.sysconf("SC_CLK_TCK")
_HEADER = struct.Struct(">I")


def _cpu(pid: int) -> float:
    """utime + stime of ``pid`` in seconds (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _row(ip: str) -> dict[str, object] | None:
    """The daemon's ``query`` answer (its state and links), or None when it does not answer."""
    try:
        with socket.create_connection((ip, CMD_PORT), timeout=2.0) as sock:
            body = json.dumps({"t": "query"}).encode()
            sock.sendall(_HEADER.pack(len(body)) + body)
            data = b""
            while len(data) < 4 or len(data) < 4 + _HEADER.unpack(data[:4])[0]:
                chunk = sock.recv(65536)
                if not chunk:
                    return None
                data += chunk
            row: dict[str, object] = json.loads(data[4:])
            return row
    except (OSError, ValueError):
        return None


def _formed(row: dict[str, object] | None, n: int) -> bool:
    if row is None or row.get("state") != "READY":
        return False
    links = row.get("connections")
    return isinstance(links, dict) and len(links) == n and set(links.values()) == {"CONNECTED"}


def run_domain(
    n: int, src: Path | None, idle: float, timeout: float, wrap: list[str]
) -> dict[str, float]:
    """Form one domain of ``n`` stand-ins; CPU and wall numbers."""
    with tempfile.TemporaryDirectory(prefix=f"imex-bench-{n}-") as tmp:
        root = Path(tmp)
        ips = [f"127.213.{n}.{k + 1}" for k in range(n)]
        names = [f"imex-bench-{n}-{k}" for k in range(n)]
        (root / "nodes.cfg").write_text("".join(f"{name}\n" for name in names))
        (root / "hosts").write_text(
            "127.0.0.1 localhost\n"
            + "".join(f"{ip} {name}\n" for ip, name in zip(ips, names, strict=True))
        )
        env = dict(os.environ)  # noqa: TID251 (a bench script, not the package)
        if src is not None:
            env["PYTHONPATH"] = str(src)
        procs: list[subprocess.Popen[bytes]] = []
        start = time.monotonic()
        try:
            for k, ip in enumerate(ips):
                cfg = root / f"imex-{k}.cfg"
                cfg.write_text(
                    "LOG_FILE_NAME=\nLOG_LEVEL=4\nDAEMONIZE=0\nBIND_INTERFACE_IP=\n"
                    f"SERVER_PORT={SERVER_PORT}\nIMEX_NODE_CONFIG_FILE={root / 'nodes.cfg'}\n"
                    "IMEX_WAIT_FOR_QUORUM=RECOVERY\nIMEX_CMD_ENABLED=1\n"
                    f"IMEX_CMD_BIND_INTERFACE_IP={ip}\nIMEX_CMD_PORT={CMD_PORT}\n"
                    "IMEX_NODE_DISCONNECTED_GRACE_TIME=-1\n"
                )
                command = [
                    sys.executable,
                    *(wrap if k == 0 and wrap else ["-m"]),
                    *("compute_domains.sim.imex_main", "imex", "-c", str(cfg)),
                    *("--hosts-file", str(root / "hosts")),
                ]
                with open(root / f"imex-{k}.log", "wb") as log:
                    procs.append(
                        subprocess.Popen(
                            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env
                        )
                    )
            pending = set(range(n))
            while pending:
                if time.monotonic() - start > timeout:
                    raise TimeoutError(f"N={n}: {len(pending)} daemons not formed in {timeout}s")
                for k in sorted(pending):
                    if procs[k].poll() is not None:
                        raise RuntimeError(f"daemon {k} exited: {procs[k].returncode}")
                    if _formed(_row(ips[k]), n):
                        pending.discard(k)
                if pending:
                    time.sleep(0.25)
            formed = time.monotonic() - start
            cpu_ready = sum(_cpu(p.pid) for p in procs)
            time.sleep(idle)
            cpu_idle = sum(_cpu(p.pid) for p in procs) - cpu_ready
            still = sum(_formed(_row(ip), n) for ip in ips)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        return {
            "n": n,
            "formed_s": round(formed, 2),
            "cpu_to_ready_s": round(cpu_ready, 2),
            "cpu_per_daemon_to_ready_s": round(cpu_ready / n, 3),
            "idle_s": idle,
            "idle_cpu_per_daemon_s": round(cpu_idle / n, 3),
            "still_formed_after_idle": still,
        }


def main() -> int:
    """Run the sizes asked for; one JSON line each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="18,36")
    parser.add_argument(
        "--src", type=Path, default=None, help="src folder to run the stand-in from"
    )
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument(
        "--profile-first",
        default="",
        metavar="ARGS",
        help="interpreter options for daemon 0, in place of '-m', e.g. '/tmp/cprof.py out' (not for timing)",
    )
    args = parser.parse_args()
    for n in (int(s) for s in args.sizes.split(",")):
        result = run_domain(n, args.src, args.idle, args.timeout, args.profile_first.split())
        result["src"] = str(args.src or "installed")
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
