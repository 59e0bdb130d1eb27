"""Node hosts: a large virtual-node sim spread over several processes, a share of racks each.

One process holding every virtual node ran out of open files at 1,152 nodes (about 13 sockets a
node against a hard limit of 20,000 this container cannot raise) and put every kubelet, plugin
and daemon on one event loop, one core. Real nodes are machines of their own; here the
supervisor starts one *node host* process (``cdctl sim node-host``) per ``racks_per_host``
racks. Each runs a ``NodeAgent`` for its share of the nodes, with its own open-files limit and
event loop, and a control socket of its own (``<sim>/hosts/<k>.sock``). Nothing between nodes
goes through the supervisor: kubelets talk to the API server, IMEX stand-ins to their peers on
the nodes' loopback addresses, whatever process runs them.

The supervisor side, ``NodeHosts``, has the agent's interface for the sim's control socket
(node faults are forwarded to the host that runs the node) and for ``sim up``'s progress (each
host writes ``registered N`` lines, then ``ready``, on its stdout). A host that exits while the
sim runs is a failure of the sim, with the host's exit code: its nodes are gone.

The plan a host runs is a JSON file (``plan_json``/``settings_from_plan``): the agent's settings
less its programs table, which the host's CLI builds itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from compute_domains.containers import procs, virtual
from compute_domains.sim import agent, agentconfig, control, errors, gcpolicy, noderoot, topology
from compute_domains.sim.kubelet import config

logger = logging.getLogger(__name__)

DEFAULT_RACKS_PER_HOST = 8
"""Racks a node host runs unless told: 144 nodes, about 2,000 open files and one event loop
that keeps their probes and heartbeats on time on this 2-core machine."""
REPORT_S = 1.0
"""How often a starting host reports how many of its nodes have registered."""
STOP_GRACE_S = 60.0
"""How long a host may take to stop its nodes after SIGTERM before it is killed."""


def racks_per_host(shape: topology.Shape, asked: int | None, virtual: bool) -> int | None:
    """How many racks each node host runs, or None when the supervisor runs the nodes itself:
    process-mode nodes always (their containers are processes already), virtual ones when not
    ``asked`` and the shape has at most ``DEFAULT_RACKS_PER_HOST`` racks."""
    if not virtual or not shape.racks:
        return None
    if asked is not None:
        return asked
    return DEFAULT_RACKS_PER_HOST if shape.racks > DEFAULT_RACKS_PER_HOST else None


def share(shape: topology.Shape, slot: int, racks_per_host: int) -> list[frozenset[str]]:
    """The node names each host runs: ``racks_per_host`` whole racks each, in rack order; the
    nodes outside racks (plain nodes, the control-plane node) with the first host."""
    hosts = max(1, -(-shape.racks // racks_per_host))
    names: list[set[str]] = [set() for _ in range(hosts)]
    for spec in topology.all_nodes(shape, slot):
        k = 0 if spec.rack is None else spec.rack // racks_per_host
        names[k].add(spec.name)
    return [frozenset(n) for n in names]


def plan_json(settings: agentconfig.AgentSettings) -> str:
    """The agent settings one host runs, as JSON (its programs table is left out)."""
    s = settings
    return json.dumps(
        {
            "shape": dataclasses.asdict(s.shape),
            "sim_root": str(s.sim_root),
            "pki_dir": str(s.pki_dir),
            "api_server": s.api_server,
            "isolate": s.isolate,
            "nvml_lib_dir": None if s.nvml_lib_dir is None else str(s.nvml_lib_dir),
            "stand_in_bin": None if s.stand_in_bin is None else str(s.stand_in_bin),
            "image_map": {k: str(v) for k, v in s.image_map.items()},
            "address_slot": s.address_slot,
            "releases": {k: str(v) for k, v in s.releases.items()},
            "kubelet": dataclasses.asdict(s.kubelet),
            "virtual_nodes": s.virtual_nodes,
            "shared_informers": s.shared_informers,
            "nodes": None if s.nodes is None else sorted(s.nodes),
            "dranet": s.dranet,
        },
        indent=1,
    )


def settings_from_plan(text: str, programs: virtual.Programs | None) -> agentconfig.AgentSettings:
    """``plan_json``'s settings back, with the host's own programs table."""
    d = json.loads(text)
    shape = dict(d["shape"])
    shape["fabric_faults"] = tuple(tuple(pair) for pair in shape["fabric_faults"])

    def path(v: str | None) -> Path | None:
        return None if v is None else Path(v)

    return agentconfig.AgentSettings(
        shape=topology.Shape(**shape),
        sim_root=Path(d["sim_root"]),
        pki_dir=Path(d["pki_dir"]),
        api_server=d["api_server"],
        isolate=d["isolate"],
        nvml_lib_dir=path(d["nvml_lib_dir"]),
        stand_in_bin=path(d["stand_in_bin"]),
        image_map={k: Path(v) for k, v in d["image_map"].items()},
        address_slot=d["address_slot"],
        releases={k: Path(v) for k, v in d["releases"].items()},
        kubelet=config.KubeletSettings(**d["kubelet"]),
        virtual_nodes=d["virtual_nodes"],
        shared_informers=d.get("shared_informers", True),
        programs=programs,
        nodes=None if d["nodes"] is None else frozenset(d["nodes"]),
        dranet=d.get("dranet", False),
    )


async def serve_host(
    settings: agentconfig.AgentSettings,
    sock: Path,
    out: TextIO,
    gc_timings: gcpolicy.Timings | None = None,
) -> None:
    """The node host's side: run the agent and its control socket until cancelled, reporting
    ``registered N`` on ``out`` while the nodes start, then ``ready``; with ``gc_timings``
    (the process's collector policy, ``gcpolicy.install``), its collections once a minute."""
    node_agent = agent.NodeAgent(settings)
    ready = asyncio.Event()

    def say(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    async def report() -> None:
        while not ready.is_set():
            say(f"registered {node_agent.registered()}")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REPORT_S):
                    await ready.wait()
        say(f"registered {node_agent.registered()}")
        say("ready")

    async with asyncio.TaskGroup() as tg:
        tg.create_task(control.ControlServer(sock, node_agent).run(), name="control-socket")
        tg.create_task(node_agent.run(ready), name="node-agent")
        tg.create_task(report(), name="report")
        if gc_timings is not None:
            tg.create_task(gcpolicy.report(gc_timings), name="gc-report")


@dataclasses.dataclass(slots=True)
class _Host:
    index: int
    names: frozenset[str]
    sock: Path
    registered: int = 0
    ready: bool = False
    proc: asyncio.subprocess.Process | None = None


class NodeHosts:
    """The supervisor's side: starts the hosts, serves their nodes as one ``control.Nodes``."""

    def __init__(self, settings: agentconfig.AgentSettings, racks_per_host: int) -> None:
        self._s = settings
        self._dir = settings.sim_root / "hosts"
        self._specs = {
            spec.name: spec for spec in topology.all_nodes(settings.shape, settings.address_slot)
        }
        self._hosts = [
            _Host(index=k, names=names, sock=self._dir / f"{k}.sock")
            for k, names in enumerate(share(settings.shape, settings.address_slot, racks_per_host))
        ]
        self._host_of = {n: h for h in self._hosts for n in h.names}

    @property
    def specs(self) -> Mapping[str, topology.NodeSpec]:
        """Every node of the sim."""
        return self._specs

    @property
    def count(self) -> int:
        """How many host processes run the nodes."""
        return len(self._hosts)

    def pids(self) -> dict[str, int]:
        """``node-host-<k>`` → pid of every host started so far (``cdctl sim status``)."""
        return {f"node-host-{h.index}": h.proc.pid for h in self._hosts if h.proc is not None}

    def registered(self) -> int:
        """Nodes registered so far, as the hosts last reported."""
        return sum(h.registered for h in self._hosts)

    async def node_table(self) -> dict[str, dict[str, Any]]:
        """Every host's node table, merged."""
        parts = await asyncio.gather(
            *(control.arequest(h.sock, {"op": "nodes"}) for h in self._hosts)
        )
        merged = {k: v for part in parts for k, v in part.items()}
        return {n: merged[n] for n in self._specs if n in merged}

    async def act(self, op: str, name: str) -> None:
        """Forward a node fault to the host that runs the node."""
        await control.arequest(self._host_of[name].sock, {"op": op, "node": name})

    async def run(self, ready: asyncio.Event) -> None:
        """Start every host; set ``ready`` once all nodes registered; stop the hosts when
        cancelled. Raises ``SimError`` when a host exits on its own."""
        noderoot.prepare_base(self._s.sim_root)
        self._dir.mkdir(parents=True, exist_ok=True)
        try:
            for h in self._hosts:
                await self._start(h)
            async with asyncio.TaskGroup() as tg:
                for h in self._hosts:
                    tg.create_task(self._follow(h, ready), name=f"node-host-{h.index}")
        finally:
            await asyncio.gather(*(self._stop(h) for h in self._hosts))

    async def _start(self, h: _Host) -> None:
        plan = self._dir / f"{h.index}.json"
        plan.write_text(plan_json(dataclasses.replace(self._s, nodes=h.names, programs=None)))
        h.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "compute_domains",
            "sim",
            "node-host",
            "--plan",
            str(plan),
            "--socket",
            str(h.sock),
            "--index",
            str(h.index),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            # Its log lines go where the supervisor's go (the sim's supervisor.log).
            preexec_fn=procs.die_with_parent,
        )
        logger.info("node host %d (pid %d) runs %d nodes", h.index, h.proc.pid, len(h.names))

    async def _follow(self, h: _Host, ready: asyncio.Event) -> None:
        assert h.proc is not None and h.proc.stdout is not None
        async for raw in h.proc.stdout:
            line = raw.decode(errors="replace").strip()
            if line.startswith("registered "):
                h.registered = int(line.split()[1])
            elif line == "ready":
                h.ready = True
                if all(x.ready for x in self._hosts):
                    logger.info("%d nodes registered on %d hosts", len(self._specs), self.count)
                    ready.set()
        code = await h.proc.wait()
        raise errors.SimError(
            f"node host {h.index} (pid {h.proc.pid}, {len(h.names)} nodes) exited with code "
            f"{code}; its nodes are gone (see the sim's supervisor.log)"
        )

    async def _stop(self, h: _Host) -> None:
        if h.proc is not None:
            await procs.terminate(h.proc, grace=STOP_GRACE_S, log=logger)
