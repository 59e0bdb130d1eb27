"""How a benchmark watches one formation: an ``Observer`` that follows the run's objects by watch
and timestamps each formation milestone when its watch event arrives.

Besides the milestones (when *every* pod or entry reached a stage) the observer keeps when
*each* workload pod was first seen Running, each daemon pod Ready and each clique entry Ready:
the points of the formation curve (``Observer.curves``, drawn by ``bench.draw``). ``observe``
(``apply``) makes one for each formation it starts.

In the per-clique scope (the CD's ``compute-domains/imex-scope-fixed`` is ``perClique``) no pod
and no clique object is made for the CD: the IMEX serving it is the clique's shared one, so the
daemon and clique milestones are those of the shared registries' entries (``shared-imex.*``:
Ready entries for as many nodes as the domain has), usually seen at once because the shared
IMEX runs before the apply.

A workload without a ComputeDomain (``placement.Workload`` ``affinity`` or ``plain``) has only
the workload milestones: no daemon, clique or CD is watched, and their marks stay absent.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from compute_domains.api import clique, computedomain, names, sharedimex


def ready(pod: Any) -> bool:
    """Whether the pod's Ready condition is True."""
    return bool(
        pod.status
        and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    )


_STAGES = ("created", "scheduled", "running", "ready")
"""How far a pod got, in order (a pod at one stage has passed the earlier ones)."""

CURVES = ("workloads_running", "daemons_ready", "entries_ready")
"""The formation curve's series (``Observer.curves``): workload pods Running, daemon pods Ready,
the domain's clique entries Ready (in the per-clique scope: its nodes' shared-registry entries)."""


def stage(pod: Any) -> str:
    """The furthest of ``_STAGES`` the pod reached."""
    if ready(pod):
        return "ready"
    statuses = (pod.status.containerStatuses if pod.status else None) or []
    if statuses and all(cs.state and cs.state.running for cs in statuses):
        return "running"
    return "scheduled" if pod.spec and pod.spec.nodeName else "created"


class Observer:
    """Follows the run's objects by watch; marks when each formation milestone was first seen.

    Timestamps are taken when the watch event arrives (not on a sampling period), so a
    sub-second gap such as "last daemon Ready → CD Ready" is measured, not rounded to a poll.
    """

    def __init__(
        self,
        client: AsyncClient,
        n: int,
        *,
        nodes: int | None = None,
        ns: str,
        driver_ns: str,
        name: str,
        uid: str | None,
        t0: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``uid`` is the CD's; None when the run made no CD (only the workload is watched)."""
        self._client, self._n, self._ns, self._driver_ns = client, n, ns, driver_ns
        self._clock = clock
        """Where ``t0`` and every timestamp come from (tests give their own)."""
        self._nodes = n if nodes is None else nodes
        """Domain nodes: daemons, clique entries and CD nodes expected (pods ÷ pods per node)."""
        self._name, self._uid, self._t0 = name, uid, t0
        self._daemons: dict[str, str] = {}
        self._workloads: dict[str, str] = {}
        self._cliques: dict[str, list[Any]] = {}
        self._cd: dict[str, Any] = {}
        self._shared: dict[str, list[Any]] = {}
        self._per_clique = False
        self.marks: dict[str, float] = {}
        self.done = asyncio.Event()
        self._arrived: dict[str, dict[str, float]] = {
            k: {} for k in ("workloads_running", "daemons_ready", "entries", "registry")
        }
        """Per series, each pod's (each entry's node's) first time in that state: the curve."""
        self._workload_nodes: dict[str, str] = {}
        """Workload pod → its node: the domain's nodes, whose registry entries count."""
        self._claims: dict[str, bool] = {}
        """The workload's ResourceClaims (one per pod, from the CD's template) → allocated:
        the claims' share of the scheduling, split into the resourceclaim controller's
        creation and the scheduler's allocation (issue 28 point 4)."""

    def _now(self) -> float:
        return self._clock() - self._t0

    def curves(self) -> dict[str, list[float]]:
        """Per series of ``CURVES``, the seconds after the apply at which each pod or entry first
        got there, sorted, to the millisecond: the k-th value is when k of them had."""
        entries = self._arrived["entries"]
        if self._per_clique:  # the clique's registry lists every node of it, not only ours
            domain = set(self._workload_nodes.values())
            entries = {n: t for n, t in self._arrived["registry"].items() if n in domain}
        found = {
            "workloads_running": self._arrived["workloads_running"],
            "daemons_ready": self._arrived["daemons_ready"],
            "entries_ready": entries,
        }
        return {k: sorted(round(t, 3) for t in found[k].values()) for k in CURVES}

    def progress(self) -> str:
        """Where the formation stands, in one line (printed while it runs, so a run cut by time
        still says how far it got: the 4,608-node run of issue 28 left nothing else)."""
        pods = collections.Counter(self._workloads.values())
        scheduled = pods["scheduled"] + pods["running"] + pods["ready"]
        parts = [
            f"{self._now():.0f}s",
            f"pods {len(self._workloads)}/{self._n} created, {scheduled} scheduled, "
            f"{len(self._arrived['workloads_running'])} running",
        ]
        if self._claims:
            allocated = sum(self._claims.values())
            parts.append(f"claims {len(self._claims)} created, {allocated} allocated")
        if self._uid:
            ready = len(self.curves()["entries_ready"])
            parts.append(f"entries {ready}/{self._nodes} Ready")
            parts.append(f"CD {self._cd.get('status') or '-'}")
        return "; ".join(parts)

    def _evaluate(self) -> None:
        now = self._now()
        n, nodes = self._n, self._nodes
        # Intermediate milestones, for the phase breakdown: every stage reached by all of them.
        # One count per stage per event (an event at N = 288 rescanned each table per stage:
        # the observer took a third of a core from the system it measures).
        for prefix, table, want in (
            ("daemon", self._daemons, nodes),
            ("workload", self._workloads, n),
        ):
            counts = collections.Counter(table.values())
            at_least = 0
            for stage in reversed(_STAGES):
                at_least += counts[stage]
                if stage != _STAGES[-1] and at_least >= want:
                    self.marks.setdefault(f"{prefix}s_{stage}", now)
            if counts["ready"] >= want:
                self.marks.setdefault(f"{prefix}s", now)
        if self._claims and len(self._claims) >= n:
            self.marks.setdefault("claims_created", now)
            if sum(self._claims.values()) >= n:
                self.marks.setdefault("claims_allocated", now)
        entries = [d for ds in self._cliques.values() for d in ds]
        if self._per_clique:
            entries = [d for ds in self._shared.values() for d in ds]
            if sum(1 for d in entries if d.get("status") == "Ready") >= nodes:
                self.marks.setdefault("daemons", now)
        if len(entries) >= nodes:
            self.marks.setdefault("cliques_registered", now)
        if sum(1 for d in entries if d.get("status") == "Ready") >= nodes:
            self.marks.setdefault("cliques", now)
        listed = self._cd.get("nodes") or []
        if self._cd.get("status") == "Ready" and len(listed) == nodes:
            self.marks.setdefault("cd", now)
        wanted = {"daemons", "workloads", "cliques", "cd"} if self._uid else {"workloads"}
        if wanted <= set(self.marks):
            self.done.set()

    async def _follow(
        self,
        res: Any,
        store: Any,
        *,
        namespace: str,
        labels: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> None:
        async for op, obj in self._client.watch(
            res, namespace=namespace, labels=labels, fields=fields
        ):
            store(op, obj)
            self._evaluate()

    def _pod_store(self, table: dict[str, str], arrived: str, at: str) -> Any:
        """Keeps each pod's stage in ``table``, and in ``self._arrived[arrived]`` when it first
        reached stage ``at`` (or a later one)."""
        first = self._arrived[arrived]
        later = set(_STAGES[_STAGES.index(at) :])
        workloads = table is self._workloads

        def store(op: str, pod: Any) -> None:
            name = pod.metadata.name
            if op == "DELETED":
                table.pop(name, None)
                return
            table[name] = reached = stage(pod)
            if reached in later and name not in first:
                first[name] = self._now()
            if workloads and pod.spec and pod.spec.nodeName:
                self._workload_nodes[name] = pod.spec.nodeName

        return store

    def _clique_store(self, op: str, obj: Any) -> None:
        data = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
        name = str(data["metadata"]["name"])
        table = self._shared if sharedimex.is_registry_name(name) else self._cliques
        if table is self._cliques and not (self._uid and name.startswith(self._uid)):
            return
        if op == "DELETED":
            table.pop(name, None)
            return
        table[name] = list(data.get("daemons") or [])
        first = self._arrived["registry" if table is self._shared else "entries"]
        for entry in table[name]:
            node = entry.get("nodeName")
            if entry.get("status") == "Ready" and node and node not in first:
                first[node] = self._now()

    def _claim_store(self, op: str, obj: Any) -> None:
        name = obj.metadata.name
        if op == "DELETED":
            self._claims.pop(name, None)
            return
        self._claims[name] = obj.status is not None and obj.status.allocation is not None

    def _cd_store(self, op: str, obj: Any) -> None:
        data = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
        self._cd = {} if op == "DELETED" else dict(data.get("status") or {})
        annotations = (data.get("metadata") or {}).get("annotations") or {}
        fixed = annotations.get(sharedimex.FIXED_SCOPE_ANNOTATION)
        self._per_clique = self._per_clique or fixed == sharedimex.Scope.PER_CLIQUE.value

    async def wait(self, timeout: float) -> None:
        """Return once every milestone was seen; TimeoutError after ``timeout`` seconds."""
        follows = [
            self._follow(
                Pod,
                self._pod_store(self._workloads, "workloads_running", "running"),
                namespace=self._ns,
                labels={"bench": self._name},
            )
        ]
        if self._uid:
            follows += [
                self._follow(
                    Pod,
                    self._pod_store(self._daemons, "daemons_ready", "ready"),
                    namespace=self._driver_ns,
                    labels={names.COMPUTE_DOMAIN_LABEL: self._uid},
                ),
                self._follow(
                    clique.ComputeDomainCliqueResource,
                    self._clique_store,
                    namespace=self._driver_ns,
                ),
                self._follow(ResourceClaim, self._claim_store, namespace=self._ns),
                self._follow(
                    computedomain.ComputeDomainResource,
                    self._cd_store,
                    namespace=self._ns,
                    fields={"metadata.name": self._name},
                ),
            ]
        tasks = [asyncio.create_task(f) for f in follows]
        try:
            async with asyncio.timeout(timeout):
                await self.done.wait()
        except TimeoutError:
            raise TimeoutError(
                f"N={self._n}: not formed in {timeout:.0f}s; milestones seen: {sorted(self.marks)}"
            ) from None
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
