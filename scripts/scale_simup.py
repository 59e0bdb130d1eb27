#!/usr/bin/env python3
"""Measure ``cdctl sim up --racks R --nodes-mode virtual`` (issue 15 point 2) and write the result.

For each R: start the sim, sample every second the RSS of the supervisor and of every process
of the sim (the supervisor's process tree) and the load average, time ``cdctl sim status`` and
``cdctl topology`` once it is up, then stop it. Optionally records a py-spy profile of the
supervisor during the start (``--profile``, needs py-spy in the venv: ``pip install py-spy``),
summarised into ``bench/results/scale-simup-profile-summary-*.txt``. Run it under the sim lock:
``flock /tmp/cd-sim.lock .venv/bin/python scripts/scale_simup.py --racks 16,32,64``.
Writes ``bench/results/scale-simup-[<label>-]<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NAME = "scale"
PROFILES = Path("/tmp/cd-scale-profiles")


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(entry))
    return kids


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its reaped children."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _comm(pid: int) -> str:
    """The process's name; the sim's own Python processes by their role."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"
    for mark, kind in (("sim serve", "supervisor"), ("sim node-host", "node-host")):
        if mark in cmdline:
            return kind
    return comm


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def tree_sample(root: int) -> dict[str, object]:
    """RSS (MiB) of ``root`` and of its whole process tree, and the tree's size."""
    kids = _children()
    todo, seen = [root], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo.extend(kids.get(pid, []))
    by_kind: dict[str, int] = {}
    cpu: dict[str, float] = {}
    for pid in seen:
        by_kind[_comm(pid)] = by_kind.get(_comm(pid), 0) + _rss_kib(pid)
        cpu[_comm(pid)] = round(cpu.get(_comm(pid), 0.0) + _cpu_s(pid), 1)
    return {
        "supervisor_fds": _fds(root),
        "max_process_fds": max((_fds(p) for p in seen), default=0),
        "cpu_s_by_comm": cpu,
        "supervisor_mib": _rss_kib(root) / 1024,
        "all_mib": sum(by_kind.values()) / 1024,
        "processes": len(seen),
        "by_comm_mib": {k: round(v / 1024, 1) for k, v in sorted(by_kind.items())},
    }


def _state(home: Path) -> dict[str, object]:
    try:
        doc: dict[str, object] = json.loads((home / "sims" / NAME / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc


def _supervisor_pid(home: Path) -> int | None:
    pid = _state(home).get("supervisor_pid")
    return int(str(pid)) if pid else None


def _milestones(home: Path) -> list[str]:
    """The supervisor log's start-up milestones, with their timestamps."""
    keys = ("control plane", "nodes registered", "driver installed", "ready", "Traceback")
    try:
        lines = (home / "sims" / NAME / "supervisor.log").read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [ln[:200] for ln in lines if any(k in ln for k in keys) and "WARNING" not in ln][:40]


def _timed(argv: list[str], env: dict[str, str]) -> dict[str, object]:
    t0 = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return {
        "argv": argv[1:],
        "seconds": round(time.monotonic() - t0, 2),
        "rc": out.returncode,
        "lines": len(out.stdout.splitlines()),
        "head": out.stdout.splitlines()[:6],
    }


def one(racks: int, home: Path, profile: Path | None) -> dict[str, object]:
    """Start a sim of ``racks`` virtual racks, measure it, stop it; the result as a dict."""
    # A driver script, like a user in a shell: its own sim home for the cdctl it runs.
    env = dict(os.environ, CD_SIM_HOME=str(home))  # noqa: TID251
    load0 = os.getloadavg()
    samples: list[dict[str, object]] = []
    stop = threading.Event()
    spy: list[subprocess.Popen[bytes]] = []

    def sample() -> None:
        t0 = time.monotonic()
        while not stop.is_set():
            pid = _supervisor_pid(home)
            if pid:
                if profile is not None and not spy:
                    spy.append(
                        subprocess.Popen(
                            [
                                str(BIN / "py-spy"),
                                "record",
                                "--pid",
                                str(pid),
                                "--rate",
                                "20",
                                "--nonblocking",
                                "--format",
                                "raw",
                                "--output",
                                str(profile),
                                "--duration",
                                "900",
                            ],
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                        )
                    )
                s = tree_sample(pid)
                s["t"] = round(time.monotonic() - t0, 1)
                s["load1"] = os.getloadavg()[0]
                extra = _state(home).get("extra")
                s["progress"] = extra.get("progress", "") if isinstance(extra, dict) else ""
                s.pop("by_comm_mib")
                s.pop("cpu_s_by_comm")
                samples.append(s)
            stop.wait(2.0)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.monotonic()
    up = subprocess.run(
        [
            str(BIN / "cdctl"),
            "sim",
            "up",
            "--name",
            NAME,
            "--racks",
            str(racks),
            "--nodes-mode",
            "virtual",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    up_s = time.monotonic() - t0
    pid_at_up = _supervisor_pid(home)
    cpu_at_up = tree_sample(pid_at_up)["cpu_s_by_comm"] if pid_at_up else {}
    stop.set()
    th.join()
    for p in spy:
        p.send_signal(2)  # py-spy writes its profile on SIGINT
        p.wait(timeout=60)
    result: dict[str, object] = {
        "racks": racks,
        "nodes": racks * 18,
        "up_rc": up.returncode,
        "up_seconds": round(up_s, 1),
        "up_tail": (up.stdout + up.stderr).splitlines()[-8:],
        "load_before": load0,
        "cpu_s_at_up": cpu_at_up,
        "peak_supervisor_mib": max((float(s["supervisor_mib"]) for s in samples), default=0),
        "peak_all_mib": max((float(s["all_mib"]) for s in samples), default=0),
        "samples": samples,
    }
    result["milestones"] = _milestones(home)
    result["started_at"] = time.strftime("%H:%M:%S", time.localtime(time.time() - up_s))
    pid = _supervisor_pid(home)
    if up.returncode == 0 and pid:
        result["after_up"] = tree_sample(pid)
        result["load_after_up"] = os.getloadavg()
        kc = str(home / "sims" / NAME / "controlplane/kubeconfig/admin.yaml")
        cd = str(BIN / "cdctl")
        result["views"] = [
            _timed([cd, "sim", "status", "--name", NAME], env),
            _timed([cd, "topology", "--kubeconfig", kc], env),
            _timed([cd, "topology", "--kubeconfig", kc, "-o", "json"], env),
            _timed([cd, "sim", "node", "list", "--name", NAME], env),
        ]
        # Steady state: a minute after up, is every node still Ready (heartbeats on time)?
        time.sleep(60)
        result["after_60s"] = tree_sample(pid)
        result["load_after_60s"] = os.getloadavg()
        kubectl = json.loads(
            subprocess.run(
                [cd, "sim", "status", "--name", NAME, "-o", "json"],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            ).stdout
            or "{}"
        )
        result["status_after_60s"] = kubectl
    result["log_warnings"] = (
        sum(
            "WARNING" in ln
            for ln in (home / "sims" / NAME / "supervisor.log")
            .read_text(errors="replace")
            .splitlines()
        )
        if (home / "sims" / NAME / "supervisor.log").exists()
        else 0
    )
    down = subprocess.run(
        [str(BIN / "cdctl"), "sim", "down", "--name", NAME],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    result["down_rc"] = down.returncode
    return result


def summarize(profile: Path, top: int = 25) -> str:
    """Where a py-spy raw profile's samples went: the event loop's share by the first project
    frame under the loop's callback, and the worker threads' by their first project frame."""
    loop: dict[str, int] = {}
    threads: dict[str, int] = {}
    total = in_loop = 0
    for line in profile.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        runs = [i for i, f in enumerate(frames) if f.startswith("Handle._run ")]
        if runs:
            in_loop += n
            rest = frames[runs[-1] + 1 :]
            key = next((f for f in rest if "compute_domains" in f), rest[0] if rest else "?")
            loop[key] = loop.get(key, 0) + n
        else:
            key = next((f for f in frames if "compute_domains" in f), "(no project frame)")
            threads[key] = threads.get(key, 0) + n
    out = [
        f"{profile.name}: {total} samples at 20/s ({total / 20:.0f} s of busy threads), "
        f"{in_loop} in the event loop ({in_loop / 20:.0f} s)",
        "event loop, by first project frame under the callback:",
    ]
    out += [f"  {v * 100 / max(in_loop, 1):5.1f}%  {k}" for k, v in _top(loop, top)]
    out.append("other threads (the default executor), share of all samples:")
    out += [f"  {v * 100 / max(total, 1):5.1f}%  {k}" for k, v in _top(threads, 8)]
    return "\n".join(out) + "\n"


def _top(counts: dict[str, int], n: int) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: -kv[1])[:n]


def main() -> int:
    """Measure each R given, or summarise a profile; write the result file."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--summarize", type=Path, default=None, help="print a profile's summary")
    ap.add_argument("--racks", default="16,32,64")
    ap.add_argument("--home", type=Path, default=Path("/tmp/cd-scale-home"))
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    if args.summarize is not None:
        print(summarize(args.summarize), end="")
        return 0
    stamp = time.strftime("%Y%m%d-%H%M%S")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
    ).stdout.strip()
    runs = []
    for r in (int(x) for x in args.racks.split(",")):
        # The raw profiles are megabytes: kept in /tmp, their summaries in bench/results.
        prof = PROFILES / f"scale-simup-profile-r{r}-{stamp}.txt" if args.profile else None
        if prof is not None:
            prof.parent.mkdir(parents=True, exist_ok=True)
        res = one(r, args.home, prof)
        if prof is not None and prof.exists():
            summary = REPO / f"bench/results/scale-simup-profile-summary-r{r}-{stamp}.txt"
            summary.write_text(summarize(prof))
        print(json.dumps({k: v for k, v in res.items() if k != "samples"}, indent=1), flush=True)
        runs.append(res)
    out = REPO / f"bench/results/scale-simup-{args.label + '-' if args.label else ''}{stamp}.json"
    out.write_text(
        json.dumps({"commit": commit, "cores": os.cpu_count(), "runs": runs}, indent=1) + "\n"
    )
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
