"""One round of ``cdctl bench formation``: one driver in a fresh sim, every size once.

A round installs one driver into a sim the caller has just started (``bench.install``: helm,
then every driver pod Ready and every GPU node's ResourceSlice), creates a namespace, runs
``formation.one_run`` once per size, and records the machine's load around it. The sim itself
is started and stopped by the CLI (only ``cli`` and ``sim`` may use the simulator), which hands
in a ``SimHandle``. What a round measured is a ``bench.roundresults.RoundResult``; the rounds'
summary and the result file's body are there too.

A size that does not form stops the round (larger sizes would not form either) but not the
invocation: the next round, with the next driver, still runs, and the failure is recorded.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount

from compute_domains.bench import (
    apicounts,
    cpu,
    drivers,
    formation,
    install,
    observe,
    placement,
    podflaps,
    roundresults,
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
    scheduler_metrics: apicounts.MetricsFetch | None = None
    """kube-scheduler's ``/metrics`` page ("" when unreadable); None: not recorded."""


def _metrics_fetch(sim: SimHandle) -> apicounts.MetricsFetch:
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
    result: roundresults.RoundResult,
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
) -> roundresults.RoundResult:
    """Install ``rnd.driver`` into the running ``sim`` and run every size once (``sizes`` are
    pod counts, ``pods_per_node`` of them on each domain node), each after the machine settled
    (``settling``; default ``SettleSettings()``). The driver is installed for every
    ``workload``: one without a CD then measures the same cluster, the driver idle."""
    spec = rnd.driver
    result = roundresults.RoundResult(
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
