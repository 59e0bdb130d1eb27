"""Where the CPU goes during a benchmark: user+system seconds per kind of process, from /proc.

A formation on the simulator runs everything on one machine: the control plane, the simulated
kubelets (one supervisor process), the driver's controller and plugins, and per CD node a daemon,
the simulated ``nvidia-imex`` and short-lived exec probes; ours (``cdctl ... run``) or NVIDIA's
(``compute-domain-*``). ``sample()`` reads every live process's own CPU time plus the time of
children it already reaped (``cutime``/``cstime``), so exec probes and exited containers are
counted, and files it under the first matching category of its command line. The difference of
two samples is what one phase cost.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kube-apiserver", (r"kube-apiserver",)),
    ("etcd", (r"/etcd ",)),
    ("controller-manager+scheduler", (r"kube-controller-manager", r"kube-scheduler")),
    # Above 8 racks of virtual nodes, node host processes run them (``sim.hosts``).
    ("sim kubelets (supervisor)", (r"sim serve", r"sim node-host")),
    # Ours runs as `cdctl controller|plugin|daemon run|check`. NVIDIA's programs are named
    # compute-domain-*; its plugin runs under `bash -c "... compute-domain-kubelet-plugin -v
    # N"` after a prestart script, and its daemon takes klog flags before the subcommand
    # (`compute-domain-daemon -v 4 run|check`).
    ("driver controller", (r"controller run", r"\bcompute-domain-controller\b")),
    (
        "kubelet plugins",
        (r"plugin run", r"\bcompute-domain-kubelet-plugin\b", r"kubelet-plugin-prestart"),
    ),
    ("IMEX daemons", (r"daemon run", r"\bcompute-domain-daemon\b.*\srun ")),
    # Ours with imex.agents=resident: one long-running `cdctl agent run` per GPU node hosts the
    # served CD's daemon (or the clique's shared IMEX) in its own process, and reaps its own
    # `nvidia-imex-ctl` checks (their CPU is its children's).
    ("IMEX agents", (r"agent run",)),
    ("daemon probes", (r"daemon check", r"\bcompute-domain-daemon\b.*\scheck ")),
    ("simulated nvidia-imex(-ctl)", (r"imex_main",)),
    ("container start-up", (r"container_init",)),
)
"""Category name → regular expressions searched in the command line (its arguments joined by
spaces, plus a trailing space); the first category with a match wins."""

DRIVER_KINDS = (
    "driver controller",
    "kubelet plugins",
    "IMEX daemons",
    "IMEX agents",
    "daemon probes",
)
"""The categories that are the driver's own processes (the rest is the cluster and the sim).
Exec probes that ended before a sample count under the sim kubelets' exited children, with
ended containers, for either driver."""

_COMPILED = tuple((name, tuple(re.compile(p) for p in patterns)) for name, patterns in CATEGORIES)


def categorize(cmdline: str) -> str | None:
    """The category of a command line, or None when it is not part of the system under test."""
    padded = f"{cmdline} "
    for name, patterns in _COMPILED:
        if any(p.search(padded) for p in patterns):
            return name
    return None


def driver_total(used: dict[str, float]) -> float:
    """CPU seconds of the driver's own processes in a ``delta`` result."""
    return round(sum(used.get(k, 0.0) for k in DRIVER_KINDS), 2)


def _stat_fields(pid: str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _tree(root: int) -> set[str]:
    """``root`` and all its live descendants (pids as strings)."""
    children: dict[str, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(entry.name)) is not None:
            children.setdefault(fields[1], []).append(entry.name)
    found, todo = set(), [str(root)]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def sample(root: int) -> tuple[dict[str, float], dict[str, float]]:
    """(own CPU seconds, reaped children's CPU seconds) per category, for ``root`` (the sim's
    supervisor) and every process below it, so other sims on the machine are not counted.

    Reaped children's time is filed under the category of the parent that reaped them (the
    supervisor reaps exec probes and container processes); ``attributed`` in ``delta`` moves
    it to "exec'd by the sim kubelets" so it is not mistaken for the supervisor's own work.
    """
    tick = os.sysconf("SC_CLK_TCK")
    own: dict[str, float] = {}
    reaped: dict[str, float] = {}
    for pid in _tree(root):
        entry = Path("/proc") / pid
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        category = categorize(raw.replace(b"\0", b" ").decode(errors="replace"))
        if category is None:
            continue
        fields = _stat_fields(entry.name)
        if fields is None:
            continue
        # Fields after the command: state=0 ... utime=11 stime=12 cutime=13 cstime=14.
        own[category] = own.get(category, 0.0) + (int(fields[11]) + int(fields[12])) / tick
        reaped[category] = reaped.get(category, 0.0) + (int(fields[13]) + int(fields[14])) / tick
    return own, reaped


def delta(
    before: tuple[dict[str, float], dict[str, float]],
    after: tuple[dict[str, float], dict[str, float]],
) -> dict[str, float]:
    """CPU seconds per category between two samples (processes that ended in between and were
    reaped by a sampled parent count under "exited children of <parent>")."""
    out: dict[str, float] = {}
    for name in {*before[0], *after[0]}:
        value = after[0].get(name, 0.0) - before[0].get(name, 0.0)
        if value > 0.005:
            out[name] = round(value, 2)
    for name in {*before[1], *after[1]}:
        value = after[1].get(name, 0.0) - before[1].get(name, 0.0)
        if value > 0.005:
            out[f"exited children of {name}"] = round(value, 2)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
