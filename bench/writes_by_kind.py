#!/usr/bin/env python3
"""Non-Lease writes per node of formation runs, by verb and kind (issue 28 point 3).

Issue 28 asks the writes per node of a formation to stay within ±10 % from N = 72 to 4,608. The
result files of ``cdctl bench formation`` record every request the API server served during the
formation (``requests_formation``, verb and resource); this prints, per file, driver and N, the
writes per node of each kind as the bench counts them (``compute_domains.bench.writes.writes``:
POST, PUT, PATCH and DELETE, Leases left out; server-side APPLY is not among them), with the
formation's time beside them. A kind whose writes grow with the formation's duration rather
than with N (the kubelets' Node status heartbeat, once a minute per node) shows as a row that
grows from left to right with the time row; ``--without`` leaves such kinds out of the total,
so the rest can be compared on its own.

Usage::

    .venv/bin/python bench/writes_by_kind.py bench/results/dev16-*.json [--without "PATCH nodes"]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from compute_domains.bench import writes


def per_node(path: Path) -> list[tuple[str, float, dict[str, float]]]:
    """One (label, seconds to all pods Running, writes per node by kind) per run of the file."""
    data = json.loads(path.read_text())
    nodes_per_pod = 1 / max(1, int(data.get("pods_per_node") or 1))
    rows = []
    for result in data.get("results", []):
        for run in result.get("runs", []):
            requests = run.get("requests_formation") or {}
            nodes = run["n"] * nodes_per_pod
            per_kind = {kind: n / nodes for kind, n in writes.writes(requests).items()}
            if per_kind:
                label = f"{path.stem[:24]} {result['driver']} N={run['n']}"
                rows.append((label, float(run.get("workloads_running_s") or 0.0), per_kind))
    return rows


def main() -> None:
    """Print the table (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument(
        "--without", action="append", default=[], help="a kind left out of the total"
    )
    args = parser.parse_args()
    rows = [row for path in args.files for row in per_node(path)]
    if not rows:
        sys.exit("no run with requests_formation in these files")
    kinds = sorted(
        {k for _, _, w in rows for k in w}, key=lambda k: -max(w.get(k, 0) for _, _, w in rows)
    )
    for label, seconds, per_kind in rows:
        total = sum(per_kind.values())
        rest = sum(v for k, v in per_kind.items() if k not in args.without)
        print(f"{label}: {seconds:.1f} s, {total:.2f} writes/node, {rest:.2f} without the left out")
    width = 10
    print("kind".ljust(30) + "".join(f"run {i + 1}".rjust(width) for i in range(len(rows))))
    print("apply → pods Running, s".ljust(30) + "".join(f"{s:{width}.1f}" for _, s, _ in rows))
    for kind in kinds:
        print(kind.ljust(30) + "".join(f"{w.get(kind, 0.0):{width}.2f}" for _, _, w in rows))


if __name__ == "__main__":
    main()
