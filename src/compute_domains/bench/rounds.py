"""One round of ``cdctl bench formation`` (one driver in a fresh sim), and the rounds' summary.

A round installs one driver into a sim the caller has just started (``bench.install``: helm,
then every driver pod Ready and every GPU node's ResourceSlice), creates a namespace, runs
``formation.one_run`` once per size, and records the machine's load around it. The sim itself
is started and stopped by the CLI (only ``cli`` and ``sim`` may use the simulator), which hands
in a ``SimHandle``. ``summarize`` groups the runs of all rounds by driver and size; ``document``
is what ``bench/results/*.json`` holds.

A size that does not form stops the round (larger sizes would not form either) but not the
invocation: the next round, with the next driver, still runs, and the failure is recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount

from compute_domains.bench import (
    cpu,
    drivers,
    formation,
    install,
    observe,
    placement,
    podflaps,
    settle,
)
from compute_domains.infra import errors, kube
from compute_domains.sim import control

Say = Callable[[str], object]
_RAW_METRICS = ("get", "--raw", "/metrics")
CpuSample = tuple[dict[str, float], dict[str, float]]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SimHandle:
    """A running sim without a driver, as the CLI started it for one round."""

    kubeconfig: Path
    bin_dir: Path
    """The built tools (``helm``, ``kubectl``)."""
    root_pid: int
    """The sim supervisor's pid: CPU is counted for its process tree only."""
    up_s: float
    """How long the sim took to start."""
    load_before: float
    """The 1-minute load average just before the sim started."""
    control_socket: Path | None = None
    """The sim's control socket (which DRA drivers each node's kubelet registered)."""
    scheduler_metrics: formation.MetricsFetch | None = None
    """kube-scheduler's ``/metrics`` page ("" when unreadable); None: not recorded."""


@dataclasses.dataclass(kw_only=True, slots=True)
class RoundResult:
    """What one round measured; ``runs`` pairs each run with its CPU seconds per kind."""

    index: int
    repeat: int
    driver: str
    sim_up_s: float
    load_before_sim: float
    install_s: float = 0.0
    """``helm upgrade --install --wait`` until it returned."""
    ready_s: float = 0.0
    """From helm's return until every driver pod was Ready and every GPU node had a slice."""
    install_pods: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    """Per component, the pods' status writes and Ready transitions from helm's start until
    ``ready_s`` ended (``podflaps.Counts``)."""
    load_end: float = 0.0
    runs: list[tuple[formation.Run, dict[str, float]]] = dataclasses.field(default_factory=list)
    failures: list[str] = dataclasses.field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        """The round as plain data, without its runs (they are under ``results``)."""
        return {
            "index": self.index,
            "repeat": self.repeat,
            "driver": self.driver,
            "sim_up_s": round(self.sim_up_s, 1),
            "load_before_sim": self.load_before_sim,
            "install_s": round(self.install_s, 1),
            "ready_s": round(self.ready_s, 1),
            "install_pods": self.install_pods,
            "load_end": self.load_end,
            "runs": [
                {"n": r.n, "load_start": r.load_start, "load_end": r.load_end} for r, _ in self.runs
            ],
            "failures": self.failures,
        }


def _metrics_fetch(sim: SimHandle) -> formation.MetricsFetch:
    async def fetch() -> str:
        res = await asyncio.to_thread(
            subprocess.run,
            [str(sim.bin_dir / "kubectl"), "--kubeconfig", str(sim.kubeconfig), *_RAW_METRICS],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return res.stdout

    return fetch


def _append_sample(into: list[CpuSample], root: int) -> None:
    into.append(cpu.sample(root))


async def _namespace(client: AsyncClient) -> str:
    """A fresh namespace for the workloads, once its default ServiceAccount exists."""
    ns = f"bench-{uuid.uuid4().hex[:5]}"
    await client.create(Namespace(metadata=ObjectMeta(name=ns)))

    async def has_account() -> bool:
        try:
            with kube.translated("get ServiceAccount default"):
                await client.get(ServiceAccount, "default", namespace=ns)
        except kube.KubeError as err:
            if not err.code:
                raise  # no answer: transport trouble propagates, as before
            return False
        return True

    await observe.wait_until(has_account, 60)  # pods are refused until it exists
    return ns


def install_timeout_s(pods: int) -> int:
    """How long ``helm install --wait`` may take for a cluster sized for ``pods`` workload pods:
    300 s (helm's usual five minutes), or a second per 8 pods where that is longer (above
    2,400 pods). At 4,608 nodes the driver's 9,216 DaemonSet pods went through
    kube-controller-manager's 200 requests/s and the node hosts' startup probes on a 16-core
    machine for more than 300 s (issue 28)."""
    return max(300, pods // 8)


def formation_timeout_s(pods: int) -> float:
    """How long a formation of ``pods`` may take before the run counts it as not formed:
    600 s, or a second a pod above 600 (N = 1,152 is CPU-bound on 2 cores for minutes: the
    sim's kubelets, plugins and daemons share them with the control plane)."""
    return max(600.0, float(pods))


def _progress(say: Say, where: str, line: str) -> None:
    say(f"{where}: {line}")


async def _sizes(
    client: AsyncClient,
    rnd: drivers.Round,
    sim: SimHandle,
    sizes: Sequence[int],
    result: RoundResult,
    say: Say,
    pods_per_node: int,
    workload: placement.Workload,
    settling: settle.SettleSettings,
) -> None:
    fetch = _metrics_fetch(sim)
    ns = await _namespace(client)
    tag = f"round {rnd.index + 1} ({rnd.driver.name})"
    try:
        for n in sizes:
            quiet = await settle.wait(settling)
            if quiet.busy is not None:
                say(
                    f"{tag} N={n}: settled after {quiet.waited_s:.1f}s ({quiet.why}, "
                    f"{quiet.busy:.0%} of the cores busy)"
                )
            cpu0 = cpu.sample(sim.root_pid)
            formed: list[CpuSample] = []
            try:
                run = await formation.one_run(
                    client,
                    fetch,
                    n,
                    scheduler=sim.scheduler_metrics,
                    ns=ns,
                    driver_ns=rnd.driver.namespace,
                    name=f"cd-{n}-{rnd.repeat}",
                    on_formed=functools.partial(_append_sample, formed, sim.root_pid),
                    pods_per_node=pods_per_node,
                    timeout=formation_timeout_s(n),
                    workload=workload,
                    progress=functools.partial(_progress, say, f"{tag} N={n}"),
                )
            except (TimeoutError, placement.PlacementError) as err:
                # Keep what was measured; larger N would not form either in this round.
                result.failures.append(f"{tag} N={n}: {err}")
                say(f"{tag} N={n}: {err}")
                return
            used = cpu.delta(cpu0, formed[0])
            run = dataclasses.replace(run, settle_s=quiet.waited_s, busy_at_apply=quiet.busy)
            result.runs.append((run, used))
            result.failures += [f"{tag} N={n}: {p}" for p in run.channel_problems]
            cd_ready = "-" if run.cd_ready_s is None else f"{run.cd_ready_s:.1f}s"
            torn = "unfinished" if run.teardown_s is None else f"{run.teardown_s:.1f}s"
            say(
                f"{tag} N={n} ({run.workload}): pods running {run.workloads_running_s:.1f}s, "
                f"CD Ready {cd_ready}, teardown {torn}, writes "
                f"{run.writes_formation} ({run.writes_formation_no_leases} without Leases), "
                f"driver CPU {cpu.driver_total(used):.1f}s, load {run.load_start:.1f}"
                f"→{run.load_end:.1f}"
            )
            if run.scheduler_moves:
                top = ", ".join(f"{e} {c}" for e, c in list(run.scheduler_moves.items())[:4])
                say(
                    f"{tag} N={n}: kube-scheduler queued pods {sum(run.scheduler_moves.values())} "
                    f"times (by the event that did it: {top})"
                )
            if run.teardown_problem:
                # Kept above; a larger N in a sim with this one's leftovers would not be clean.
                result.failures.append(f"{tag} N={n}: {run.teardown_problem}")
                say(f"{tag} N={n}: {run.teardown_problem}")
                return
    finally:
        await client.delete(Namespace, ns)


async def run_round(
    rnd: drivers.Round,
    sim: SimHandle,
    sizes: Sequence[int],
    say: Say,
    pods_per_node: int = 1,
    workload: placement.Workload = placement.Workload.CLAIMS,
    settling: settle.SettleSettings | None = None,
) -> RoundResult:
    """Install ``rnd.driver`` into the running ``sim`` and run every size once (``sizes`` are
    pod counts, ``pods_per_node`` of them on each domain node), each after the machine settled
    (``settling``; default ``SettleSettings()``). The driver is installed for every
    ``workload``: one without a CD then measures the same cluster, the driver idle."""
    spec = rnd.driver
    result = RoundResult(
        index=rnd.index,
        repeat=rnd.repeat,
        driver=spec.name,
        sim_up_s=sim.up_s,
        load_before_sim=sim.load_before,
    )
    client = kube.client(kube.KubeSettings(kubeconfig=sim.kubeconfig, field_manager="bench"))
    try:
        flaps = podflaps.PodFlaps(client, spec.namespace)
        flaps.start()
        t0 = time.monotonic()
        try:
            await install.install(
                sim.bin_dir / "helm",
                sim.kubeconfig,
                spec,
                install_timeout_s(max(sizes, default=0)),
                client,
            )
            result.install_s = time.monotonic() - t0
            result.ready_s = await install.wait_ready(
                client, spec.namespace, timeout=600, registered=_registered(sim.control_socket)
            )
        finally:
            counts = await flaps.stop()
            result.install_pods = {k: dataclasses.asdict(v) for k, v in counts.items()}
        say(
            f"round {rnd.index + 1}: {spec.name} installed in {result.install_s:.1f}s, "
            f"ready {result.ready_s:.1f}s later"
        )
        say(f"round {rnd.index + 1}: pods during the install: {flaps.summary()}")
        if flaps.flapped:
            say(f"round {rnd.index + 1}: Ready → NotReady: {', '.join(flaps.flapped)}")
        await _sizes(
            client,
            rnd,
            sim,
            sizes,
            result,
            say,
            pods_per_node,
            workload,
            settling or settle.SettleSettings(),
        )
    except (errors.ComputeDomainsError, TimeoutError) as err:
        # Not fatal to the invocation: the other drivers' rounds still tell something.
        result.failures.append(f"round {rnd.index + 1} ({spec.name}): {err}")
        say(f"round {rnd.index + 1} ({spec.name}) failed: {err}")
    finally:
        await client.close()
    result.load_end = os.getloadavg()[0]
    return result


def _registered(sock: Path | None) -> install.Registered | None:
    """The sim's node table, read as node → the DRA drivers its kubelet registered."""
    if sock is None:
        return None
    where = sock

    async def ask() -> dict[str, list[str]]:
        table = await control.arequest(where, {"op": "nodes"})
        return {n: list(row.get("drivers") or []) for n, row in table.items()}

    return ask


def _span(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(rounds: Sequence[RoundResult], order: Sequence[str]) -> list[dict[str, Any]]:
    """One summary per (driver, N) that has runs: driver in ``order``, then N ascending.

    Each is ``formation.summarize`` plus the driver's name, the median CPU seconds per kind,
    and the spread of two per-run totals: every sampled process (``cpu_total_s``) and the
    driver's own processes (``cpu_driver_s``). Totals are summed per run before the median:
    a sum of per-kind medians would mix different runs.
    """
    groups: dict[tuple[str, int], list[tuple[formation.Run, dict[str, float], int]]] = {}
    for r in rounds:
        for run, used in r.runs:
            groups.setdefault((r.driver, run.n), []).append((run, used, r.index))
    out = []
    for key in sorted(groups, key=lambda k: (list(order).index(k[0]), k[1])):
        runs = groups[key]
        summary = formation.summarize([run for run, _, _ in runs])
        kinds = {k for _, used, _ in runs for k in used}
        summary["driver"] = key[0]
        summary["cpu_s"] = {
            k: statistics.median([used.get(k, 0.0) for _, used, _ in runs]) for k in sorted(kinds)
        }
        summary["cpu_total_s"] = _span([round(sum(used.values()), 2) for _, used, _ in runs])
        summary["cpu_driver_s"] = _span([cpu.driver_total(used) for _, used, _ in runs])
        summary["runs"] = [
            {**dataclasses.asdict(run), "cpu_s": used, "round": index} for run, used, index in runs
        ]
        out.append(summary)
    return out


def document(specs: Sequence[drivers.DriverSpec], rounds: Sequence[RoundResult]) -> dict[str, Any]:
    """The result file's body (the CLI adds the machine and the final load average)."""
    return {
        "drivers": [s.describe() for s in specs],
        "rounds": [r.describe() for r in rounds],
        "results": summarize(rounds, [s.name for s in specs]),
        "failures": [f for r in rounds for f in r.failures],
    }
