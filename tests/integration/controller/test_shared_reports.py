"""What a node's shared IMEX reports, read by the controller for every per-clique CD it serves.

The test plays the resident agents: their entries in the registry ``shared-imex.<cliqueID>``
and the notes they write there under their index (``api.sharedimex``): the peers their IMEX
lost (``compute-domains/lost-peers.<index>``, the per-domain daemon's format) and why their
IMEX cannot start (``compute-domains/imex-blocked.<index>``, a host ``nvidia-imex.service``
holding the session, upstream #524); and the kubelet plugin (the Nodes' channel annotations and
the workload claims). Three nodes a, b, c of one clique serve three CDs: X on {a, b}, Y on
{a, b, c}, Z on {a, c}.

* a's IMEX lost b: X and Y (they have both a and b) turn NotReady, ``PeerUnreachable``, naming
  b and a; Z (no b) stays Ready. The note gone, X and Y are Ready again.
* c's IMEX cannot start (its entry NotReady, its blocked note): Y and Z name c and the reason in
  their status and each gets a Warning ``ImexSessionInUse``; X (no c) stays Ready. The note gone
  and c Ready: Y and Z are Ready.
"""

from __future__ import annotations

import json
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Node
from lightkube.types import PatchType

from compute_domains.api import names, sharedimex
from compute_domains.api.clique import ComputeDomainCliqueResource
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController
from tests.integration.controller.test_shared_scope import (
    CLIQUE,
    RESIDENT,
    _cd,
    _event,
    _ready,
    _registry,
    _status,
)

SINCE = "2026-12-02T05:00:03Z"
HELD = (
    "nvidia-imex cannot start: the node's IMEX session is held by another nvidia-imex "
    "(NV_ERR_IN_USE), most likely a host nvidia-imex.service; disable and mask it"
)


async def _notes(client: AsyncClient, ns: str, notes: dict[str, str | None]) -> None:
    """Set (None: remove) annotations of the registry, as the agents' writes would."""
    await client.patch(
        ComputeDomainCliqueResource,
        sharedimex.registry_name(CLIQUE),
        {"metadata": {"annotations": notes}},
        namespace=ns,
        patch_type=PatchType.MERGE,
    )


def _is(status: str, reason: str | None = None) -> Any:
    def check(cd: Any) -> bool:
        if cd["status"]["status"] != status:
            return False
        return reason is None or _ready(cd)["reason"] == reason

    return check


async def _events(client: AsyncClient, ns: str, uid: str, reason: str) -> list[Event]:
    return [
        e
        async for e in client.list(Event, namespace=ns)
        if e.involvedObject.uid == uid and e.reason == reason
    ]


async def test_lost_peers_and_a_held_session_are_told_on_every_cd_the_node_serves(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller(**RESIDENT)
    uids = {name: (await _cd(client, name, user_ns)).metadata.uid for name in ("x", "y", "z")}
    tag = uids["x"][:6]
    a, b, c = (f"r{n}-{tag}" for n in "abc")
    members = {"x": (a, b), "y": (a, b, c), "z": (a, c)}
    channel = {"x": 1, "y": 2, "z": 3}
    ips = {a: "10.6.0.1", b: "10.6.0.2", c: "10.6.0.3"}
    async with objects.nodes(client, a, b, c):
        for node in (a, b, c):
            await client.patch(
                Node, node, {"metadata": {"labels": {names.GPU_CLIQUE_LABEL: CLIQUE}}}
            )
        for cd, nodes in members.items():
            for node in nodes:
                pod = await objects.workload_pod(client, user_ns, f"w-{cd}-{node}", node=node)
                await objects.workload_claim(
                    client, user_ns, f"c-{cd}-{node}", domain_uid=uids[cd], node=node, pod=pod
                )
        channels = {uids[cd]: n for cd, n in channel.items()}
        entries = [(n, ips[n], "Ready") for n in (a, b, c)]  # indices 0, 1, 2
        for node in (a, b, c):  # the agents that write them, alive
            await objects.agent_pod(client, driver_ns, node=node, ip=ips[node], ready=True)
        await _registry(client, driver_ns, channels, entries)
        for node in (a, b, c):
            served = {uids[cd]: channel[cd] for cd, nodes in members.items() if node in nodes}
            annotations = {sharedimex.channel_key(uid): str(n) for uid, n in served.items()}
            labels = {sharedimex.SHARED_IMEX_LABEL: sharedimex.SHARED_IMEX_ON}
            await client.patch(
                Node, node, {"metadata": {"labels": labels, "annotations": annotations}}
            )
        for cd in members:
            await _status(client, user_ns, cd, _is("Ready"))

        # a's shared IMEX lost b.
        lost_key = f"{names.LOST_PEERS_ANNOTATION_PREFIX}0"
        note = {"node": a, "ip": ips[a], "lost": {b: SINCE}}
        await _notes(client, driver_ns, {lost_key: json.dumps(note, sort_keys=True)})
        for cd in ("x", "y"):
            got = await _status(client, user_ns, cd, _is("NotReady", "PeerUnreachable"))
            message = _ready(got)["message"]
            assert f"node {b}: its IMEX peers lost their links to it: {a}" in message, message
        assert _is("Ready")(await _status(client, user_ns, "z", lambda _c: True))
        await _notes(client, driver_ns, {lost_key: None})
        for cd in ("x", "y"):
            await _status(client, user_ns, cd, _is("Ready"))

        # c's shared IMEX cannot start: the session is held (its agent's entry and note).
        entries[2] = (c, ips[c], "NotReady")
        await _registry(client, driver_ns, channels, entries)
        blocked = sharedimex.Blocked(reason="ImexSessionInUse", message=HELD)
        value = sharedimex.blocked_value(c, ips[c], blocked)
        await _notes(client, driver_ns, {sharedimex.blocked_key(2): value})
        for cd in ("y", "z"):
            got = await _status(
                client, user_ns, cd, lambda o: f"node {c}: {HELD}" in _ready(o)["message"]
            )
            assert got["status"]["status"] == "NotReady", got["status"]
            event = await _event(client, user_ns, uids[cd], "ImexSessionInUse")
            assert event.type == "Warning" and f"node {c}: {HELD}" in (event.message or "")
        assert _is("Ready")(await _status(client, user_ns, "x", lambda _c: True))
        assert await _events(client, user_ns, uids["x"], "ImexSessionInUse") == []

        # The host service is masked: c's IMEX starts, its agent removes the note.
        entries[2] = (c, ips[c], "Ready")
        await _notes(client, driver_ns, {sharedimex.blocked_key(2): None})
        await _registry(client, driver_ns, channels, entries)
        for cd in ("y", "z"):
            await _status(client, user_ns, cd, _is("Ready"))
            (event,) = await _events(client, user_ns, uids[cd], "ImexSessionInUse")
            assert (event.count or 1) == 1  # told once per CD, not once per status sync
