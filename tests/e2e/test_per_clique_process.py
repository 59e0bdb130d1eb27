"""A crash of one node's shared IMEX is reported on every ComputeDomain that node serves
(issue 26 point 3), on process-mode nodes where ``nvidia-imex`` is a real process.

Resident agents in the per-clique scope; CDs A and B each have a pod on both nodes of the
clique. ``kill -9`` of n00's shared ``nvidia-imex``: both CDs turn NotReady, each naming n00
(the status of both is watched, so a NotReady that lasts a moment is seen), then both are Ready
again on the same indices once the agent's supervisor has restarted it; n01's IMEX is the same
process throughout, and no workload pod was replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.api import computedomain
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.test_per_clique import N0, N1, _cd_ready, _clique_id, _pods, _registry_ready
from tests.e2e.test_seed_example import _eventually
from tests.e2e.test_shared_imex_agent_process import _imex_pid

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
NODES_MODE = "process"
CDS = ("crash-a", "crash-b")


@pytest.fixture(scope="module")
def per_clique(rack_sim: state.SimPaths) -> Iterator[state.SimPaths]:
    """The sim with resident agents in the per-clique scope."""
    helpers.upgrade(rack_sim, "imex.agents=resident", "imex.scope=perClique")
    yield rack_sim


async def _watch_status(admin: AsyncClient, name: str, seen: list[dict[str, Any]]) -> None:
    async for _, obj in admin.watch(
        computedomain.ComputeDomainResource,
        namespace="default",
        fields={"metadata.name": name},
    ):
        seen.append(obj.to_dict().get("status") or {})  # type: ignore[no-untyped-call]


def _names_n0_not_ready(status: dict[str, Any]) -> bool:
    entry = {n["name"]: n for n in status.get("nodes") or []}.get(N0)
    messages = " ".join(c.get("message") or "" for c in status.get("conditions") or [])
    return (
        status.get("status") == "NotReady"
        and entry is not None
        and entry["status"] == "NotReady"
        and N0 in messages
    )


async def test_a_crashed_shared_imex_is_reported_on_every_cd_of_its_node(
    admin: AsyncClient, per_clique: state.SimPaths
) -> None:
    cid = await _clique_id(admin)
    indices = await _eventually(
        lambda: _registry_ready(admin, cid), 240, "both nodes Ready in the shared registry"
    )
    for cd in CDS:
        await helpers.create_cd(admin, cd)
        await _pods(admin, cd)
    for cd in CDS:
        await _eventually(lambda cd=cd: _cd_ready(admin, cd, 2), 300, f"{cd} Ready")
    pods = {
        p.metadata.name: p.metadata.uid
        async for p in admin.list(Pod, namespace="default")
        if p.metadata is not None
    }
    first_n0, first_n1 = _imex_pid(per_clique, N0), _imex_pid(per_clique, N1)
    assert first_n0 is not None and first_n1 is not None

    seen: dict[str, list[dict[str, Any]]] = {cd: [] for cd in CDS}
    watches = [asyncio.create_task(_watch_status(admin, cd, seen[cd])) for cd in CDS]
    try:

        async def watching() -> bool:
            return all(seen.values())

        await _eventually(watching, 30, "both status watches started")
        os.kill(first_n0, signal.SIGKILL)

        async def both_reported() -> bool:
            return all(any(_names_n0_not_ready(s) for s in seen[cd]) for cd in CDS)

        await _eventually(both_reported, 120, "both CDs NotReady naming n00")

        async def back() -> bool:
            pid = _imex_pid(per_clique, N0)
            ready = [await _cd_ready(admin, cd, 2) for cd in CDS]
            return pid not in (None, first_n0) and all(ready)

        await _eventually(back, 180, "n00's IMEX restarted and both CDs Ready again")
    finally:
        for task in watches:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    for cd in CDS:
        st = await _cd_ready(admin, cd, 2)
        assert st is not None and {n["name"]: n["index"] for n in st["nodes"]} == indices, st
    assert _imex_pid(per_clique, N1) == first_n1, "n01's IMEX was restarted"
    after = {
        p.metadata.name: p.metadata.uid
        async for p in admin.list(Pod, namespace="default")
        if p.metadata is not None
    }
    assert after == pods, "a workload pod was replaced"
