"""A member its IMEX peers lost turns NotReady at once (issue 29, point 3), on the real API.

The test plays the daemons: the clique entries and their readiness, and one daemon's
lost-peers annotation (what ``daemon/peerwatch.py`` writes when its IMEX lost a peer's link
past the bound). The Node of the lost member stays Ready throughout (its kubelet is still
"heartbeating"): only the peers' report makes its entry NotReady, with ``PeerUnreachable``
naming it and the peer that lost it, and a ``NodeNotReady`` Event; once the report is gone and
its own daemon says Ready, it is Ready again.
"""

from __future__ import annotations

import json

from lightkube import AsyncClient
from lightkube.types import PatchType

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainCliqueResource
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController
from tests.integration.controller.test_status import (
    CLIQUE,
    _events,
    _nodes,
    _ready,
    _reason,
    _wait_status,
)


async def test_a_member_its_peers_lost_is_not_ready_before_its_node_is(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    cd = await objects.create_cd(client, "cd-l", user_ns, "cd-l-channel")
    uid = cd.metadata.uid
    n1, n2 = f"l1-{uid[:6]}", f"l2-{uid[:6]}"
    ips = {n1: "10.6.0.1", n2: "10.6.0.2"}
    async with objects.nodes(client, n1, n2):
        for i, node in enumerate((n1, n2)):
            pod = await objects.workload_pod(client, user_ns, f"w-{i}", node=node)
            await objects.workload_claim(
                client, user_ns, f"c-{i}", domain_uid=uid, node=node, pod=pod
            )
            await objects.daemon_pod(
                client,
                driver_ns,
                domain_uid=uid,
                node=node,
                ip=ips[node],
                clique_id=CLIQUE,
                ready=True,
            )
        clique = None
        for node in (n1, n2):
            clique = await objects.register(
                client,
                driver_ns,
                domain_uid=uid,
                clique_id=CLIQUE,
                node=node,
                ip=ips[node],
                ready=True,
            )
        assert clique is not None
        await _wait_status(client, user_ns, "cd-l", lambda s, n: s["status"] == "Ready")
        index = {d.node_name: d.index for d in clique.daemons}[n1]
        key = f"{names.LOST_PEERS_ANNOTATION_PREFIX}{index}"
        since = "2026-12-02T05:00:00Z"
        note = {"node": n1, "ip": ips[n1], "lost": {n2: since}}

        async def annotate(value: str | None) -> None:
            await client.patch(
                ComputeDomainCliqueResource,
                names.clique_object_name(uid, CLIQUE),
                {"metadata": {"annotations": {key: value}}},
                namespace=driver_ns,
                patch_type=PatchType.MERGE,
            )

        await annotate(json.dumps(note))
        cdo = await _wait_status(client, user_ns, "cd-l", lambda s, n: s["status"] == "NotReady")
        assert _reason(cdo["status"]) == "PeerUnreachable"
        assert {k: v["status"] for k, v in _nodes(cdo).items()} == {n1: "Ready", n2: "NotReady"}
        message = _ready(cdo["status"])["message"]
        assert f"node {n2}: its IMEX peers lost their links to it: {n1} (since {since})" in message
        (event,) = await _events(client, user_ns, uid, "NodeNotReady")
        assert n2 in event.message and "IMEX peers lost" in event.message

        # The link is back: the daemon removes its note; n2's own daemon still says Ready.
        await annotate(None)
        await _wait_status(client, user_ns, "cd-l", lambda s, n: s["status"] == "Ready")
        (back,) = await _events(client, user_ns, uid, "NodeReady")
        assert n2 in back.message
