#!/usr/bin/env python3
"""CPU of one simulated ``nvidia-imex-ctl -c <cfg> -q``, the IMEX check every daemon runs.

Two modes, both alternating two versions of the ctl so a drifting load hits both alike:

* ``standalone``: one stand-in ``nvidia-imex`` (a one-node domain, READY), and ``--runs``
  checks per round through each wrapper: ``main`` is the wrapper the simulator wrote before the
  cut (``python -m compute_domains.sim.imex_main ctl`` with ``--base-src`` on PYTHONPATH),
  ``branch`` is this checkout's ``driverroot.ctl_script``. CPU is the children's
  utime + stime (``RUSAGE_CHILDREN``), so it counts ``sh``, the interpreter and the query.
* ``sim``: on a running sim (``--sim NAME``, e.g. kept by ``cdctl bench formation --keep``),
  every node's driver-root ``nvidia-imex-ctl`` is switched between the two wrappers (atomic
  rename) and the sim's CPU per kind of process (``bench.cpu``) is read over ``--window``
  seconds each; the agents' checks are "exited children of IMEX agents". The branch's wrapper
  is put back at the end. Run it under the sim lock.

Usage (from a worktree's root; ``--base-src`` is a checkout of main's ``src``)::

    .venv/bin/python bench/imex_ctl_start.py standalone --base-src ../base/src --runs 100
    flock /tmp/cd-sim.lock .venv/bin/python bench/imex_ctl_start.py sim --sim NAME \\
        --base-src ../base/src --window 45 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compute_domains.bench import cpu
from compute_domains.sim import driverroot


def _main_wrapper(base_src: Path) -> str:
    return (
        f"#!/bin/sh\nPYTHONPATH={base_src} exec {sys.executable} "
        '-m compute_domains.sim.imex_main ctl "$@"\n'
    )


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def standalone(base_src: Path, runs: int, rounds: int) -> None:
    """Checks against one READY stand-in, through each wrapper in turn."""
    with tempfile.TemporaryDirectory(prefix="imex-ctl-") as tmp:
        root = Path(tmp)
        (root / "nodes.cfg").write_text("n0\n")
        (root / "hosts").write_text("127.0.0.1 localhost\n127.214.0.1 n0\n")
        cfg = root / "imex.cfg"
        cfg.write_text(
            "LOG_FILE_NAME=\nLOG_LEVEL=4\nDAEMONIZE=0\nBIND_INTERFACE_IP=\nSERVER_PORT=50000\n"
            f"IMEX_NODE_CONFIG_FILE={root / 'nodes.cfg'}\nIMEX_WAIT_FOR_QUORUM=RECOVERY\n"
            "IMEX_CMD_ENABLED=1\nIMEX_CMD_BIND_INTERFACE_IP=127.214.0.1\nIMEX_CMD_PORT=50005\n"
        )
        wrappers = {
            "main": _main_wrapper(base_src),
            "branch": driverroot.ctl_script(sys.executable),
        }
        paths = {}
        for label, text in wrappers.items():
            paths[label] = root / f"nvidia-imex-ctl-{label}"
            paths[label].write_text(text)
            paths[label].chmod(0o755)
        argv = [sys.executable, "-m", "compute_domains.sim.imex_main", "imex", "-c", str(cfg)]
        daemon = subprocess.Popen(
            [*argv, "--hosts-file", str(root / "hosts")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for label, path in paths.items():  # both answer READY before anything is timed
                for _ in range(100):
                    done = subprocess.run([path, "-c", cfg, "-q"], capture_output=True, text=True)
                    if done.stdout == "READY\n":
                        break
                    time.sleep(0.2)
                else:
                    raise SystemExit(f"{label}: no READY answer: {done.stdout!r} {done.stderr!r}")
            for r in range(rounds):
                for label in ("main", "branch") if r % 2 == 0 else ("branch", "main"):
                    before = _children_cpu()
                    for _ in range(runs):
                        subprocess.run([paths[label], "-c", cfg, "-q"], capture_output=True)
                    used = _children_cpu() - before
                    row = {"mode": "standalone", "wrapper": label, "runs": runs}
                    row |= {"cpu_ms_per_run": round(1000 * used / runs, 1)}
                    print(json.dumps(row | {"load": os.getloadavg()[0]}), flush=True)
        finally:
            daemon.terminate()
            daemon.wait()


def _sim_root(name: str) -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "sim serve" in line and f"--name {name} " in line:
            return int(entry.name)
    raise SystemExit(f"no running sim named {name}")


def in_sim(name: str, home: Path, base_src: Path, window: float, rounds: int) -> None:
    """Switch every node's ctl between the wrappers; the sim's CPU per kind in each window."""
    root = _sim_root(name)
    nodes = (home / "sims" / name / "nodes").resolve()
    ctls = [p / "run/nvidia/driver/usr/bin/nvidia-imex-ctl" for p in sorted(nodes.iterdir())]
    ctls = [c for c in ctls if c.exists()]
    branch = ctls[0].read_text()
    wrappers = {"main": _main_wrapper(base_src), "branch": branch}

    def put(text: str) -> None:
        for ctl in ctls:
            tmp = ctl.with_suffix(".swap")
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, ctl)

    try:
        for r in range(rounds):
            for label in ("branch", "main") if r % 2 == 0 else ("main", "branch"):
                put(wrappers[label])
                time.sleep(6)  # checks started before the switch have ended
                load = os.getloadavg()[0]
                before = cpu.sample(root)
                time.sleep(window)
                used = cpu.delta(before, cpu.sample(root))
                row: dict[str, object] = {"mode": "sim", "wrapper": label, "nodes": len(ctls)}
                row |= {"window_s": window, "cpu_s": used, "total_cpu_s": sum(used.values())}
                row |= {"checks_cpu_s": used.get("exited children of IMEX agents", 0.0)}
                print(json.dumps(row | {"load": [load, os.getloadavg()[0]]}), flush=True)
    finally:
        put(branch)


def main() -> int:
    """Parse the command line and run one mode."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("mode", choices=("standalone", "sim"))
    parser.add_argument("--base-src", type=Path, required=True, help="main's src folder")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sim", default="bench")
    parser.add_argument("--home", type=Path, default=Path.home() / ".local/state/compute-domains")
    parser.add_argument("--window", type=float, default=45.0)
    args = parser.parse_args()
    base = args.base_src.resolve()
    if args.mode == "standalone":
        standalone(base, args.runs, args.rounds)
    else:
        in_sim(args.sim, args.home, base, args.window, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
