"""The clique's shared IMEX on process-mode nodes, where IMEX and the agent are processes.

* kill -9 of one node's shared ``nvidia-imex``: the agent's supervisor restarts it (the agent
  itself is not restarted), its registry entry goes NotReady at once and Ready again once the
  new IMEX passes its check, on the same index; the other node's IMEX is the same process;
* deleting that node's agent pod (SIGTERM): its IMEX stops, its entry goes NotReady and stays
  on its index; the replacement agent pod registers on that index again, Ready, with its IP.

The registry is watched throughout, so a NotReady that lasts a moment is seen too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Node, Pod

from compute_domains.api import clique, names, sharedimex
from compute_domains.api.computedomain import Readiness
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_resident_drills_process import _env, _processes
from tests.e2e.test_seed_example import _eventually
from tests.e2e.test_shared_imex_agent import (  # noqa: F401  (the fixture)
    AGENT_LABELS,
    _agent,
    _entries,
    _ip,
    _label,
    _name,
    _registry,
    shared_sim,
)

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
NODES_MODE = "process"
A, B = "gb200-r0-n00", "gb200-r0-n01"


def _imex_pid(sim: state.SimPaths, node: str) -> int | None:
    pids = [p for p, env in _processes(sim, "imex_main imex") if env.get("NODE_NAME") == node]
    assert len(pids) <= 1, f"more than one nvidia-imex on {node}: {pids}"
    return pids[0] if pids else None


async def _record(admin: AsyncClient, name: str, seen: list[tuple[str, Readiness, str]]) -> None:
    """Append (node, status, IP) of A's entry for every version of the registry."""
    async for _, obj in admin.watch(
        clique.ComputeDomainCliqueResource, namespace=DRIVER_NS, fields={"metadata.name": name}
    ):
        entry = clique.ComputeDomainClique.from_resource(obj).daemon(A)
        if entry is not None:
            seen.append((entry.node_name, entry.status, entry.ip_address))


async def test_a_crashed_or_stopped_shared_imex_is_reported_and_comes_back_on_its_index(
    admin: AsyncClient,
    shared_sim: state.SimPaths,  # noqa: F811  (the fixture imported above)
) -> None:

    async def agents_ready() -> bool:
        found = [p async for p in admin.list(Pod, namespace=DRIVER_NS, labels=AGENT_LABELS)]
        return len(found) == 2 and all(helpers.ready(p) for p in found)

    await _eventually(agents_ready, 180, "an agent pod Ready on each node")
    node_a = await admin.get(Node, A)
    assert node_a.metadata is not None
    name = sharedimex.registry_name((node_a.metadata.labels or {})[names.GPU_CLIQUE_LABEL])
    for node in (A, B):
        await _label(admin, node, True)

    async def both_ready() -> dict[str, tuple[int, Readiness]] | None:
        entries = _entries(await _registry(admin, name))
        ok = set(entries) == {A, B} and all(s is Readiness.READY for _, s in entries.values())
        return entries if ok and _imex_pid(shared_sim, A) and _imex_pid(shared_sim, B) else None

    indices = {n: i for n, (i, _) in (await _eventually(both_ready, 120, "both Ready")).items()}
    first_a, first_b = _imex_pid(shared_sim, A), _imex_pid(shared_sim, B)
    assert first_a is not None and first_b is not None
    agent_a = await _agent(admin, A)
    seen: list[tuple[str, Readiness, str]] = []
    recorder = asyncio.create_task(_record(admin, name, seen))
    try:
        await _eventually(lambda: _true(bool(seen)), 30, "the registry watched")

        # kill -9 of A's IMEX: restarted by the agent; NotReady at once, then Ready again.
        os.kill(first_a, signal.SIGKILL)
        mark = len(seen)

        async def restarted() -> bool:
            pid = _imex_pid(shared_sim, A)
            statuses = [s for _, s, _ in seen[mark:]]
            return (
                pid not in (None, first_a)
                and Readiness.NOT_READY in statuses
                and statuses[-1] is Readiness.READY
            )

        await _eventually(restarted, 90, "A's IMEX restarted, its entry NotReady then Ready")
        assert {n: i for n, (i, _) in _entries(await _registry(admin, name)).items()} == indices
        assert _imex_pid(shared_sim, B) == first_b
        now = await admin.get(Pod, _name(agent_a), namespace=DRIVER_NS)
        assert now.status is not None and now.status.containerStatuses
        assert now.status.containerStatuses[0].restartCount == 0  # only IMEX restarted
        events = [
            e
            async for e in admin.list(
                Event, namespace=DRIVER_NS, fields={"involvedObject.name": _name(agent_a)}
            )
        ]
        assert any(e.reason == "ImexRestarted" for e in events), events

        # SIGTERM of A's agent (pod deleted): IMEX stops, the entry stays NotReady on its
        # index; the replacement pod takes it up again.
        mark = len(seen)
        await admin.delete(Pod, _name(agent_a), namespace=DRIVER_NS)

        async def replaced() -> Pod | None:
            found = [
                p
                async for p in admin.list(Pod, namespace=DRIVER_NS, labels=AGENT_LABELS)
                if p.spec is not None and p.spec.nodeName == A and helpers.ready(p)
            ]
            new = [p for p in found if _name(p) != _name(agent_a)]
            return new[0] if new else None

        new_a = await _eventually(replaced, 180, "a new agent pod Ready on A")
        await _eventually(both_ready, 120, "A's entry Ready again")
        after = seen[mark:]
        assert (A, Readiness.NOT_READY, _ip(agent_a)) in after, after
        assert after[-1] == (A, Readiness.READY, _ip(new_a)), after
        assert {n: i for n, (i, _) in _entries(await _registry(admin, name)).items()} == indices
        assert len(_processes(shared_sim, "imex_main imex")) == 2
        assert _env(_imex_pid(shared_sim, A) or 0).get("POD_NAME") == _name(new_a)
    finally:
        recorder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await recorder
    for node in (A, B):
        await _label(admin, node, False)


async def _true(value: bool) -> bool:
    return value
