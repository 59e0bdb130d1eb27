"""The scale table (issue 15 point 3): formation at N = 18 … 1,152 against its targets.

Scale runs are ``cdctl bench formation --nodes-mode virtual --prefix scale`` (one pod per node)
and ``--prefix scale816 --pods-per-node 4`` (NVIDIA's issue #816 shape); ``make bench
BENCH_LARGE=1`` runs both. Every run of every such file is one row, so sizes measured in
different invocations (a large size alone takes most of an hour here) sit in one table, each
with its source. The per-node columns divide by the domain's nodes, not its pods.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PREFIXES = ("scale", "scale816")
"""Result file prefixes the table reads (``<prefix>-formation-*.json``)."""

READY_TARGETS_S = {72: 15.0, 1152: 60.0}
"""Issue 15's apply → CD Ready targets on this 2-core machine."""
WRITES_SPREAD = 0.10
"""Non-Lease writes per node must stay within ±10 % of the smallest size's."""
CONFLICTS_PER_JOIN = 0.1
STATUS_PATH_S = 1.0
"""Last daemon Ready → CD Ready, at every N."""


def conflicts(failed: dict[str, int]) -> int:
    """Refused clique writes (409 conflicts and 422 failed patch tests) of one formation."""
    return sum(
        count
        for key, count in failed.items()
        if "computedomaincliques" in key and key.rsplit(" ", 1)[-1] in ("409", "422")
    )


def documents(results_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every scale result file's name and document."""
    return [
        (path.name, json.loads(path.read_text()))
        for prefix in PREFIXES
        for path in sorted(results_dir.glob(f"{prefix}-formation-*.json"))
    ]


def rows(docs: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per run of every scale result document, smallest domain first."""
    out = []
    for source, doc in docs:
        if doc.get("workload", "claims") != "claims":
            continue  # no CD: the floor table's (bench.floor), not a formation against targets
        per_node = int(doc.get("pods_per_node", 1))
        for result in doc.get("results", []):
            cpu = result.get("cpu_s", {})
            for run in result.get("runs", []):
                nodes = run["n"] // per_node
                out.append(
                    {
                        "source": source,
                        "pods": run["n"],
                        "nodes": nodes,
                        "per_node": per_node,
                        "cd_ready_s": run["cd_ready_s"],
                        "pods_running_s": run["workloads_running_s"],
                        "teardown_s": run["teardown_s"],
                        "status_path_s": run["last_daemon_to_cd_ready_s"],
                        "writes_per_node": run["writes_formation_no_leases"] / nodes,
                        "conflicts_per_join": conflicts(run.get("failed_formation", {})) / nodes,
                        "controller_cpu_ms_per_node": 1000
                        * cpu.get("driver controller", 0.0)
                        / nodes,
                        "apiserver_cpu_ms_per_node": 1000 * cpu.get("kube-apiserver", 0.0) / nodes,
                        "load": run.get("load_start", 0.0),
                        "watches": _watches(run, nodes),
                    }
                )
    return sorted(out, key=lambda r: (r["per_node"], r["nodes"], r["source"]))


def _watches(run: dict[str, Any], nodes: int) -> str:
    """The API server's open watches as "per sim node before the apply / added per domain node
    once formed"; "-" for a result file from before issue 28 (no watch count)."""
    idle, formed = run.get("watches_idle"), run.get("watches_formed")
    sim_nodes = run.get("sim_nodes", 0)
    if not idle or not sim_nodes:
        return "-"
    before, after = sum(idle.values()), sum((formed or {}).values())
    return f"{before / sim_nodes:.2f} / {(after - before) / nodes:+.2f}"


def failures(docs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Sizes that did not form, each with its source file (they have no row)."""
    return [
        f"{failure} (`{source}`)" for source, doc in docs for failure in doc.get("failures", [])
    ]


def verdicts(row: dict[str, Any], base_writes: float | None) -> list[str]:
    """The issue's targets this row misses, each with by how much ("" when none is missed)."""
    missed = []
    target = READY_TARGETS_S.get(row["nodes"]) if row["per_node"] == 1 else None
    if target is not None and row["cd_ready_s"] > target:
        missed.append(f"CD Ready {row['cd_ready_s'] / target:.1f}x the {target:.0f} s target")
    if base_writes and abs(row["writes_per_node"] / base_writes - 1) > WRITES_SPREAD:
        missed.append(f"writes/node {100 * (row['writes_per_node'] / base_writes - 1):+.0f} %")
    if row["conflicts_per_join"] > CONFLICTS_PER_JOIN:
        missed.append(f"{row['conflicts_per_join']:.2f} conflicts/join")
    if row["status_path_s"] > STATUS_PATH_S:
        missed.append(f"status path {row['status_path_s']:.2f} s")
    return missed


def _seconds(value: float | None) -> str:
    """A teardown's seconds, or "unfinished" when it did not end within the run's bound."""
    return "unfinished" if value is None else f"{value:.1f} s"


def table(results_dir: Path) -> str:
    """The Markdown block: every scale run and the targets it meets or misses."""
    docs = documents(results_dir)
    found = rows(docs)
    failed = failures(docs)
    if not found and not failed:
        return "No scale runs recorded yet (`make bench BENCH_LARGE=1`)."
    base = next((r["writes_per_node"] for r in found if r["per_node"] == 1), None)
    lines = [
        "| pods (per node) | nodes | apply → CD Ready | apply → pods Running | teardown | "
        "last daemon Ready → CD Ready | non-Lease writes / node | clique conflicts / join | "
        "controller CPU / node | apiserver CPU / node | watches / sim node, + / domain node | "
        "load | targets missed | source |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in found:
        missed = verdicts(r, base if r["per_node"] == 1 else None)
        lines.append(
            f"| {r['pods']} ({r['per_node']}) | {r['nodes']} | {r['cd_ready_s']:.1f} s | "
            f"{r['pods_running_s']:.1f} s | {_seconds(r['teardown_s'])} | "
            f"{r['status_path_s']:.2f} s | {r['writes_per_node']:.1f} | "
            f"{r['conflicts_per_join']:.2f} | {r['controller_cpu_ms_per_node']:.0f} ms | "
            f"{r['apiserver_cpu_ms_per_node']:.0f} ms | {r['watches']} | {r['load']:.1f} | "
            f"{'; '.join(missed) or 'none'} | `{r['source']}` |"
        )
    if failed:
        lines += ["", "Did not form (no row above):", ""] + [f"- {f}" for f in failed]
    lines += [
        "",
        "Targets (issue 15, this 2-core machine): CD Ready ≤ 15 s at N = 72 and ≤ 60 s at "
        "N = 1,152; non-Lease writes per node within ±10 % of the smallest size's; ≤ 0.1 "
        "clique conflicts (409/422) per join; last daemon Ready → CD Ready ≤ 1 s at every N.",
    ]
    return "\n".join(lines)
