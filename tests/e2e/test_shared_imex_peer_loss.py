"""A lost node is PeerUnreachable on every per-clique CD that has it, from the clique's shared
IMEX peer watch (issue 26; upstream's power-cut drill, ``test_peer_loss.py``, in this scope).

Resident agents in the per-clique scope on three process nodes of one clique, with upstream's
node-lifecycle timings (40 s node grace, ``PATIENCE``). CDs X on {n00, n02}, Y on {n01, n02}
and Z on {n00, n01} are Ready; then n02 is powered off (``cdctl sim node stop``: every
container dies, the kubelet goes silent, the Node reads Ready for 40 s more). The other nodes'
shared IMEX lose their links to it, their peer watches write it into the registry
(``compute-domains/lost-peers.<index>``), and X and Y turn NotReady, ``PeerUnreachable``,
naming n02, while Z stays Ready; with the node back, all three are Ready again and the notes
are gone. (n02 stands for a node the leading controller does not run on: where it does, the
nodes' roles turn so another one is lost.)
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from compute_domains.api import names
from compute_domains.sim import control, state, topology
from tests.e2e import helpers
from tests.e2e.test_seed_example import _eventually
from tests.e2e.test_shared_imex_reports import (
    _cleanup,
    _ready,
    _ready_condition,
    _registry,
    _registry_ready,
    per_clique,  # noqa: F401  (the fixture)
)

pytestmark = pytest.mark.timeout(1500)
SHAPE = topology.Shape(racks=1, nodes_per_rack=3)
PATIENCE = True
N0, N1, N2 = "gb200-r0-n00", "gb200-r0-n01", "gb200-r0-n02"


async def test_a_lost_node_is_peer_unreachable_on_every_cd_that_has_it(
    admin: AsyncClient,
    per_clique: state.SimPaths,  # noqa: F811  (the fixture imported above)
) -> None:
    await _eventually(lambda: _registry_ready(admin), 180, "the shared registry Ready")
    # The lost node is one the leading controller does not run on (it would take the status
    # writer with it); n02 unless the controller runs there.
    leader = await helpers.leader_node(admin)
    lost = next(n for n in (N2, N1, N0) if n != leader)
    a, b = (n for n in (N0, N1, N2) if n != lost)
    members = {"lost-x": (a, lost), "lost-y": (b, lost), "lost-z": (a, b)}
    pods = []
    for cd, nodes in members.items():
        await helpers.create_cd(admin, cd)
        for node in nodes:
            pods.append(f"{cd}-{node[-3:]}")
            await admin.create(
                helpers.channel_pod(pods[-1], f"{cd}-rct", node=node, command="sleep 3600")
            )
    for cd in members:
        await _eventually(lambda cd=cd: _ready(admin, cd, 2), 300, f"{cd} Ready")

    started = time.monotonic()
    await asyncio.to_thread(
        control.request, per_clique.root / "control.sock", {"op": "stop", "node": lost}
    )

    async def unreachable(cd: str) -> dict[str, Any] | None:
        st = await helpers.cd_status(admin, cd)
        ready = _ready_condition(st)
        return st if ready.get("reason") == "PeerUnreachable" else None

    for cd in ("lost-x", "lost-y"):

        async def cd_unreachable(cd: str = cd) -> bool:
            return await unreachable(cd) is not None

        try:
            await helpers.within(30, cd_unreachable, f"{cd} PeerUnreachable", 0.1)
        except AssertionError:
            reg = await _registry(admin)
            print("registry:", reg.metadata.annotations if reg else None)
            print("status:", await helpers.cd_status(admin, cd))
            raise
        got = await helpers.cd_status(admin, cd)
        message = str(_ready_condition(got).get("message", ""))
        assert f"node {lost}: its IMEX peers lost their links to it" in message, message
    after = time.monotonic() - started
    print(f"\nnode stop -> both CDs PeerUnreachable: {after:.2f} s (node grace 40 s)")
    node = await admin.get(Node, lost)
    conditions = node.status.conditions or [] if node.status else []
    assert any(c.type == "Ready" and c.status == "True" for c in conditions), "Node still Ready"
    assert await _ready(admin, "lost-z", 2), await helpers.cd_status(admin, "lost-z")

    await asyncio.to_thread(
        control.request, per_clique.root / "control.sock", {"op": "start", "node": lost}
    )
    for cd in members:
        await _eventually(lambda cd=cd: _ready(admin, cd, 2), 300, f"{cd} Ready again")
    reg = await _registry(admin)
    assert reg is not None
    assert not [
        k
        for k in reg.metadata.annotations or {}
        if k.startswith(names.LOST_PEERS_ANNOTATION_PREFIX)
    ]
    await _cleanup(admin, pods, list(members))
