#!/usr/bin/env python3
"""Time ratio against CPU ratio of side-by-side formation runs (issue 26 point 6).

On a machine whose cores every simulated node shares, a formation that is CPU-bound takes about
as much longer or shorter than another driver's as it spends more or less CPU: its time ratio
follows its CPU ratio. A formation that waits on something else (pods being created and started
one after another, a fixed delay) has a time ratio well above its CPU ratio. This reads result
files of ``cdctl bench formation`` with several drivers (``sidebyside-*.json``) and prints, per
file, size and driver, the median apply → all pods Running and the median CPU of every sim
process from the apply until formed, each divided by the reference driver's (default
``nvidia``).

Usage::

    python3 bench/cpu_vs_time.py bench/results/scopes4*-sidebyside-*.json [--reference nvidia]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def medians(path: Path) -> dict[tuple[str, int], tuple[float, float]]:
    """(driver, N) → (median time to all pods Running, median CPU of every sim process)."""
    data = json.loads(path.read_text())
    found: dict[tuple[str, int], tuple[list[float], list[float]]] = {}
    for result in data.get("results", []):
        for run in result.get("runs", []):
            t = run.get("workloads_running_s")
            cpu = run.get("cpu_s") or {}
            if t is None or not cpu:
                continue
            times, cpus = found.setdefault((result["driver"], run["n"]), ([], []))
            times.append(float(t))
            cpus.append(sum(float(v) for v in cpu.values()))
    return {k: (statistics.median(t), statistics.median(c)) for k, (t, c) in found.items()}


def main() -> int:
    """Print the table for the files on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--reference", default="nvidia")
    args = parser.parse_args()
    print("| file | N | driver | time | CPU | time ÷ ref | CPU ÷ ref |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for path in args.files:
        table = medians(path)
        for (driver, n), (t, cpu) in sorted(table.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            ref = table.get((args.reference, n))
            if ref is None or driver == args.reference:
                continue
            print(
                f"| `{path.name}` | {n} | {driver} | {t:.1f} s | {cpu:.1f} s "
                f"| {t / ref[0]:.2f} | {cpu / ref[1]:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
