"""The seeds' two-domain 64+8 scenario, step by step, on a running sim (issue 16).

Shared by ``cdctl demo --scenario two-domain-64plus8`` (which prints it) and its e2e test (which
asserts it). ``Scenario`` applies the guide's §3.4 DeviceClass and its §15.6 file
(``examples/guide/k8s134-2domain-64plus8-computedomain-dranet.yaml``) with the racks' cluster
UUIDs filled in for the guide's placeholders (and, with warm spares, our warm-nodes annotation
added to its ComputeDomain; ``warm=False`` is the file as written, NVIDIA's behaviour), runs the
training framework (``sim.trainer``, which adopts the file's rank-0 pods and creates the other
ranks with the same channel and RDMA claims), and measures three phases on a
``timeline.Timeline``:

- ``formed``: 16 training pods Running with their channel and 2 placeholders per rack, every CD
  entry Ready;
- ``fail(node)``: the node is powered off (the sim's node stop) and the rank it ran is replaced
  in its rack (the guide's failure timeline, times relative to the stop);
- ``heal(node)``: the node is started again and the domain settles (every node Ready, every
  entry and daemon Ready).

The guide's file, its names and ``render`` live in ``guidefile``, the ``Failure`` record and its
derivation in ``failover``; their names are re-exported here, where callers have always found
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from lightkube import AsyncClient, codecs

from compute_domains.bench import failover, timeline
from compute_domains.bench.failover import Failure as Failure
from compute_domains.bench.guidefile import CD_NAME as CD_NAME
from compute_domains.bench.guidefile import CHANNEL_TEMPLATE as CHANNEL_TEMPLATE
from compute_domains.bench.guidefile import DEVICECLASS as DEVICECLASS
from compute_domains.bench.guidefile import GUIDE_UUIDS as GUIDE_UUIDS
from compute_domains.bench.guidefile import MANIFEST as MANIFEST
from compute_domains.bench.guidefile import PLACEHOLDER_APP as PLACEHOLDER_APP
from compute_domains.bench.guidefile import PLACEHOLDER_LABEL as PLACEHOLDER_LABEL
from compute_domains.bench.guidefile import RDMA_TEMPLATE as RDMA_TEMPLATE
from compute_domains.bench.guidefile import racks_of as racks_of
from compute_domains.bench.guidefile import render as render
from compute_domains.infra import kube
from compute_domains.sim import control, trainer


class Scenario:
    """One run of the scenario against a running sim (module docstring)."""

    def __init__(
        self,
        client: AsyncClient,
        control_socket: Path,
        manifest: str,
        *,
        warm: bool,
        device_class: Path,
        namespace: str = "default",
        driver_ns: str = "compute-domains",
    ) -> None:
        self.client, self._sock, self._manifest = client, control_socket, manifest
        self.warm, self.namespace = warm, namespace
        self._device_class = device_class
        self.timeline = timeline.Timeline(
            client, namespace=namespace, driver_ns=driver_ns, cd=CD_NAME
        )
        self.node_rack: dict[str, str] = {}
        self.racks: tuple[trainer.Rack, ...] = ()
        self.actions: list[trainer.Action] = []
        self.t_applied = 0.0
        self.warm_at_failure: set[str] = set()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Scenario]:
        """Follow the cluster (and run the framework once ``apply`` started it) inside."""
        self.node_rack, self.racks = await racks_of(self.client)
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            watcher = tg.create_task(self.timeline.run(), name="scenario:timeline")
            try:
                yield self
            finally:
                watcher.cancel()
                if (t := getattr(self, "_trainer_task", None)) is not None:
                    t.cancel()

    def objects(self) -> list[dict[str, Any]]:
        """The manifest's objects for this cluster and mode."""
        return render(self._manifest, self.racks, warm=self.warm)

    async def apply(self) -> list[str]:
        """Create the §3.4 DeviceClass (unless there) and the manifest's objects, then start the
        framework; returns what was created."""
        self.t_applied = time.monotonic()
        done = []
        device_class = yaml.safe_load(self._device_class.read_text())
        try:
            with kube.translated("create DeviceClass rdma-devices"):
                await self.client.create(codecs.from_dict(device_class))
            done.append(f"DeviceClass/{device_class['metadata']['name']} created")
        except kube.AlreadyExists:
            done.append(f"DeviceClass/{device_class['metadata']['name']} already there")
        for doc in self.objects():
            obj = codecs.from_dict(doc)
            await self.client.create(obj)
            done.append(f"{doc['kind']}/{doc['metadata']['name']} created")
        settings = trainer.TrainerSettings(
            racks=self.racks, channel_template=CHANNEL_TEMPLATE, rdma_template=RDMA_TEMPLATE
        )
        framework = trainer.Trainer(self.client, settings, self.actions.append)
        self._trainer_task = self._tg.create_task(framework.run(), name="scenario:trainer")
        return done

    # ---- reading the state ----------------------------------------------------------------

    def rack_pods(self, rack: str, *, placeholders: bool) -> list[Any]:
        """The rack's training pods (or placeholders) now, terminating ones excluded."""
        out = []
        for pod in self.timeline.pods.values():
            labels = pod.metadata.labels or {}
            is_placeholder = labels.get(PLACEHOLDER_LABEL) == PLACEHOLDER_APP
            if is_placeholder != placeholders or pod.metadata.deletionTimestamp is not None:
                continue
            if placeholders:
                if pod.metadata.name.startswith(f"spare-{rack}-"):
                    out.append(pod)
            elif labels.get(trainer.RACK_LABEL) == rack:
                out.append(pod)
        return out

    def rack_entries(self, rack: str) -> list[dict[str, Any]]:
        """The CD's ``status.nodes`` entries of the rack's nodes, by index."""
        return sorted(
            (e for n, e in self.timeline.entries.items() if self.node_rack.get(n) == rack),
            key=lambda e: (e.get("index", -1), e["name"]),
        )

    def progress(self, rack: str) -> dict[str, int]:
        """Counts for the forming display of one rack."""
        rack_nodes = {n for n, r in self.node_rack.items() if r == rack}
        daemons = [
            d for d in self.timeline.daemons.values() if (d.spec.nodeName or "") in rack_nodes
        ]
        entries = self.rack_entries(rack)
        return {
            "training_ready": sum(
                1 for p in self.rack_pods(rack, placeholders=False) if timeline._ready(p)
            ),
            "placeholders_running": sum(
                1 for p in self.rack_pods(rack, placeholders=True) if timeline._ready(p)
            ),
            "daemons": len(daemons),
            "daemons_ready": sum(1 for d in daemons if timeline._ready(d)),
            "entries": len(entries),
            "entries_ready": sum(1 for e in entries if e.get("status") == "Ready"),
        }

    def formed(self) -> bool:
        """16 training pods Ready, 2 placeholders Running per rack, every entry Ready (all 18
        nodes of each rack with warm spares; the 16 training nodes without)."""
        want = 18 if self.warm else 16
        return all(
            p["training_ready"] == 16
            and p["placeholders_running"] == 2
            and p["entries_ready"] == p["entries"] == want
            for p in (self.progress(r.name) for r in self.racks)
        )

    def settled(self) -> bool:
        """Every node Ready, every entry and daemon Ready, no pod of the namespace terminating."""
        tl = self.timeline
        return (
            all(tl.nodes.values())
            and all(e.get("status") == "Ready" for e in tl.entries.values())
            and all(timeline._ready(d) for d in tl.daemons.values())
            and not any(p.metadata.deletionTimestamp for p in tl.pods.values())
        )

    # ---- the steps -------------------------------------------------------------------------

    async def wait_formed(self, timeout: float) -> float:
        """Seconds from ``apply`` until ``formed``."""
        await self.timeline.until(self.formed, timeout, "the 64+8 job formed")
        return time.monotonic() - self.t_applied

    def warm_nodes(self) -> set[str]:
        """Nodes with no training pod whose daemon and CD entry are Ready (warm spares)."""
        tl = self.timeline
        ready_daemons = {d.spec.nodeName for d in tl.daemons.values() if timeline._ready(d)}
        return {
            n
            for n, e in tl.entries.items()
            if e.get("status") == "Ready" and n in ready_daemons and self.pod_on(n) is None
        }

    def pod_on(self, node: str) -> Any:
        """The training pod on ``node`` (None when there is none)."""
        return next(
            (
                p
                for p in self.timeline.pods.values()
                if p.spec.nodeName == node and trainer.RANK_LABEL in (p.metadata.labels or {})
            ),
            None,
        )

    def node_of(self, rack: str, rank: int) -> str:
        """The node the rank's live pod runs on."""
        for pod in self.rack_pods(rack, placeholders=False):
            if (pod.metadata.labels or {}).get(trainer.RANK_LABEL) == str(rank):
                return str(pod.spec.nodeName)
        raise LookupError(f"rank {rank} of rack {rack} has no pod")

    async def node_op(self, op: str, node: str) -> float:
        """``cdctl sim node stop|start``; returns when it was asked."""
        t0 = time.monotonic()
        self.timeline.mark(f"sim-node-{op}", node)
        await asyncio.to_thread(control.request, self._sock, {"op": op, "node": node})
        return t0

    async def fail(self, node: str, timeout: float) -> Failure:
        """Stop ``node``; wait until its rank's replacement is Running with its channel and the
        CD's entry of the spare it runs on is Ready."""
        old = self.pod_on(node)
        if old is None:
            raise LookupError(f"no training pod on {node}")
        labels = old.metadata.labels
        rack, rank = labels[trainer.RACK_LABEL], labels[trainer.RANK_LABEL]
        self.warm_at_failure = self.warm_nodes()
        t0 = await self.node_op("stop", node)

        def replacement() -> Any:
            for p in self.rack_pods(rack, placeholders=False):
                if p.metadata.labels.get(trainer.RANK_LABEL) == rank and (
                    p.metadata.name != old.metadata.name
                ):
                    return p
            return None

        await self.timeline.until(
            lambda: (r := replacement()) is not None and timeline._ready(r),
            timeout,
            f"a Ready replacement for rank {rank} of rack {rack}",
        )
        new = replacement()
        spare = str(new.spec.nodeName)
        await self.timeline.until(
            lambda: self.timeline.entries.get(spare, {}).get("status") == "Ready",
            timeout,
            f"the CD entry of {spare} Ready",
        )
        return failover.measure(
            self.timeline,
            t0,
            node,
            old,
            new,
            rack,
            actions=self.actions,
            node_rack=self.node_rack,
            warm_at_failure=self.warm_at_failure,
        )

    async def heal(self, node: str, timeout: float) -> tuple[float, list[timeline.Mark]]:
        """Start ``node`` again; seconds until ``settled``, and the transitions meanwhile."""
        t0 = await self.node_op("start", node)
        await self.timeline.until(
            lambda: self.timeline.nodes.get(node, False) and self.settled(),
            timeout,
            f"{node} back and the domain settled",
        )
        return time.monotonic() - t0, self.timeline.since(t0)
