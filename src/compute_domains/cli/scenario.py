"""``cdctl demo --scenario two-domain-64plus8``: the seeds' 64+8 failure timeline, measured.

Starts a 2-rack sim (virtual nodes unless ``--nodes-mode process`` is given; the sim's fast
node-lifecycle timings: NotReady 8 s after the last heartbeat, eviction 10 s later; DRANET's
stand-in on), applies the guide's §15.6 file
``examples/guide/k8s134-2domain-64plus8-computedomain-dranet.yaml`` (with or without our
warm-nodes annotation), runs the
training framework (``sim.trainer``, in this process), shows each rack forming, stops the node
of rack A's rank 5 and prints the guide's timeline with the measured times, domain A's entries
and what happened in rack B; then starts the node again and shows the domain heal. The steps
are ``bench.scenario``'s; this module only prints them (and records them with ``--record``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from compute_domains.bench import scenario
from compute_domains.cli import options, views
from compute_domains.infra import kube
from compute_domains.sim import state

NOT_READY_S = 8
EVICTION_S = 10
"""The sim's node-lifecycle timings the scenario runs with (``controlplane`` defaults)."""
_GUIDE = {
    "node_not_ready": "~5s",
    "pod_removed": "~5s (evicted)",
    "replacement_created": "~10s",
    "placeholder_preempted": "~12s",
    "replacement_bound": "~12s",
    "daemon_on_spare_ready": "already running",
    "replacement_ready": "~15s",
    "spare_entry_ready": "-",
}
_STEPS = {
    "node_not_ready": "node NotReady",
    "pod_removed": "training pod removed",
    "replacement_created": "replacement created by the framework",
    "placeholder_preempted": "placeholder preempted by the scheduler",
    "replacement_bound": "replacement bound to the spare",
    "daemon_on_spare_ready": "IMEX daemon on the spare Ready",
    "replacement_ready": "replacement Running with its channel",
    "spare_entry_ready": "domain a's entry of the spare Ready",
}


def _forming(run: scenario.Scenario, elapsed: float) -> Table:
    table = Table(
        "rack",
        "training pods Running",
        "placeholders",
        "IMEX daemons Ready",
        "CD entries Ready",
        title=f"training-job-cd forming ({elapsed:5.1f}s)",
    )
    for rack in run.racks:
        p = run.progress(rack.name)
        table.add_row(
            f"{rack.name} (...{rack.cluster_uuid[-8:]})",
            f"{p['training_ready']}/16",
            f"{p['placeholders_running']}/2",
            f"{p['daemons_ready']}/{p['daemons']}",
            f"{p['entries_ready']}/{p['entries']}",
        )
    return table


def _entries(console: Console, run: scenario.Scenario, rack: str, title: str) -> None:
    table = Table("NODE", "INDEX", "STATUS", "POD", title=title)
    for e in run.rack_entries(rack):
        pods = [
            str(p.metadata.name)
            for p in run.timeline.pods.values()
            if p.spec.nodeName == e["name"] and p.metadata.deletionTimestamp is None
        ]
        table.add_row(e["name"], str(e.get("index")), str(e.get("status")), ", ".join(pods) or "-")
    console.print(table)


def _timeline(console: Console, f: scenario.Failure) -> None:
    table = Table("t (s)", "step", "guide (§15.6)", title=f"failure of {f.node} ({f.old_pod})")
    table.add_row("0.00", f"node {f.node} powered off (`cdctl sim node stop`)", "t=0")
    for key, label in _STEPS.items():
        at = f.steps[key]
        shown = "-" if at is None else f"{at:.2f}"
        if key in ("daemon_on_spare_ready", "spare_entry_ready") and f.spare_was_warm:
            shown = "before"
            label += " (warm spare: before the failure)"
        if key == "pod_removed":
            label += f": {f.removal}"
        if key == "replacement_bound":
            label += f" {f.spare}"
        if key == "placeholder_preempted":
            label += f": {f.preempted}"
        table.add_row(shown, label, _GUIDE[key])
    console.print(table)
    bound, ready = f.steps["replacement_bound"], f.steps["replacement_ready"]
    if bound is not None and ready is not None:
        console.print(f"bound to the spare → Running with its channel: {ready - bound:.2f}s")


def _record(doc: dict[str, Any], warm: bool) -> Path:
    out_dir = options.repo_root() / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    kind = "warm" if warm else "nowarm"
    out = out_dir / f"scenario-64plus8-{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    load = os.getloadavg()[0]
    out.write_text(
        json.dumps({"machine": f"{os.cpu_count()} cores", "load_at_end": load, **doc}, indent=1)
    )
    return out


async def run(
    console: Console, paths: state.SimPaths, *, warm: bool, timeout: float, record: bool
) -> dict[str, Any]:
    """The scenario on the running sim ``paths``; returns what was measured."""
    client = kube.client(kube.KubeSettings(kubeconfig=paths.kubeconfig, field_manager="cdctl"))
    manifest = (options.repo_root() / scenario.MANIFEST).read_text()
    run_ = scenario.Scenario(
        client,
        paths.root / "control.sock",
        manifest,
        warm=warm,
        device_class=options.repo_root() / scenario.DEVICECLASS,
    )
    try:
        async with run_.running():
            for line in await run_.apply():
                console.print(line)
            waiting = asyncio.ensure_future(run_.wait_formed(timeout))
            with views.live(console) as live:
                while not waiting.done():
                    live.update(_forming(run_, time.monotonic() - run_.t_applied))
                    await asyncio.wait({waiting}, timeout=0.25)  # display refresh only
                live.update(_forming(run_, time.monotonic() - run_.t_applied))
            formed_s = waiting.result()
            console.print(f"[bold green]formed in {formed_s:.1f}s[/]")
            cd_formed = run_.timeline.cd_status
            verdict, reason, message = cd_formed
            console.print(f"training-job-cd: {verdict} {reason} {message}".rstrip())
            victim = run_.node_of("a", 5)
            console.rule(f"[bold]failure: rack a's rank 5 node {victim} stops")
            failure = await run_.fail(victim, timeout)
            _timeline(console, failure)
            _entries(console, run_, "a", "domain a's entries after the replacement")
            others = failure.other_racks_marks
            console.print(
                "rack b untouched: no daemon restart, no pod or entry change"
                if not others
                else f"[red]rack b saw {len(others)} transitions: {others}"
            )
            console.rule(f"[bold]{victim} starts again")
            heal_s, marks = await run_.heal(victim, timeout)
            for m in marks:
                what = m.name if not m.what.startswith("daemon-") else f"daemon on {m.detail}"
                detail = m.detail if not m.what.startswith("daemon-") else ""
                console.print(f"  +{m.at - marks[0].at:6.2f}s {m.what:<16} {what} {detail}")
            console.print(f"settled {heal_s:.1f}s after the node start")
            _entries(console, run_, "a", "domain a's entries after the heal")
    finally:
        await client.close()
    doc = {
        "scenario": "two-domain-64plus8",
        "warm": warm,
        "node_lifecycle": {"not_ready_s": NOT_READY_S, "eviction_s": EVICTION_S},
        "formed_s": round(formed_s, 2),
        "cd_status_formed": list(cd_formed),
        "failure": dataclasses.asdict(failure),
        "heal_s": round(heal_s, 2),
        "heal_marks": [dataclasses.asdict(m) | {"at": round(m.at - marks[0].at, 2)} for m in marks],
    }
    if record:
        console.print(f"results written to {_record(doc, warm)}")
    return doc
