"""Real daemons tell the controller which peers their IMEX lost, and only those (issue 29, 3).

Three daemons form one domain (as in ``test_daemon``). Their IMEX processes are real processes
of the simulated nodes, so a peer is made slow or dead with signals to its IMEX:

* held (SIGSTOP) for 2.5 s, under IMEX's 4 s ping timeout, then resumed: a slow but live peer.
  Its links stay up, and no daemon writes a lost-peers annotation (checked once the domain is
  UP again from a reporter's view, and in the reporters' logs);
* held until reported: both other daemons write their annotation naming its node (the time
  from the hold to both notes is printed); resumed, the links come back and both notes go.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.sim import state
from tests.integration.daemon import pods
from tests.integration.daemon.conftest import StartController
from tests.integration.daemon.pods import NODES

pytestmark = pytest.mark.integration


def _notes(clique: ComputeDomainClique) -> dict[str, dict[str, Any]]:
    """Reporter node → its lost-peers note."""
    out = {}
    for key, value in (clique.metadata.annotations or {}).items():
        if key.startswith(names.LOST_PEERS_ANNOTATION_PREFIX):
            note = json.loads(value)
            out[note["node"]] = note
    return out


def _signal(pod: str, sig: signal.Signals) -> None:
    (pid,) = pods.imex_pids(pod)
    os.kill(pid, sig)


async def test_a_held_peer_is_reported_and_a_slow_one_is_not(
    admin: AsyncClient,
    daemon_sim: state.SimPaths,
    driver_ns: str,
    compute_domain: Any,
    pod_owner: Any,
    start_controller: StartController,
) -> None:
    cd, ns = compute_domain, driver_ns
    await start_controller(3)
    clique_id = await pods.node_clique(admin, NODES[0])
    name = names.clique_object_name(cd.metadata.uid, clique_id)
    spec = {"ns": ns, "cd": cd, "clique_id": clique_id, "max_nodes": 3, "owner": pod_owner}
    for i, node in enumerate(NODES):
        await admin.create(pods.daemon_pod(f"daemon-{i}", node, **spec))
    await pods.wait_clique(admin, ns, name, pods.all_ready(set(NODES)))
    running = {i: await pods.wait_ready(admin, f"daemon-{i}", ns) for i in range(3)}
    ip0 = running[0].status.podIP  # type: ignore[union-attr]
    await pods.wait_domain_up(daemon_sim.root, ip0, 3)

    # A slow but live peer: held under the ping timeout, then resumed.
    _signal("daemon-2", signal.SIGSTOP)
    try:
        await asyncio.sleep(2.5)  # the fault's length, not a wait for the cluster
    finally:
        _signal("daemon-2", signal.SIGCONT)
    await pods.wait_domain_up(daemon_sim.root, ip0, 3)
    raw = await admin.get(ComputeDomainCliqueResource, name, namespace=ns)
    assert _notes(ComputeDomainClique.from_resource(raw)) == {}
    for peer in ("daemon-0", "daemon-1"):
        log = await pods.log_of(admin, peer, ns, "compute-domain-daemon")
        assert "IMEX lost its link to peer" not in log, log

    # A dead peer (held until reported): both others name its node.
    held = time.monotonic()
    _signal("daemon-2", signal.SIGSTOP)
    try:

        def both_report(c: ComputeDomainClique) -> bool:
            notes = _notes(c)
            return set(notes) == {NODES[0], NODES[1]} and all(
                set(n["lost"]) == {NODES[2]} for n in notes.values()
            )

        clique = await pods.wait_clique(admin, ns, name, both_report)
        print(f"\nIMEX held -> both peers' notes written: {time.monotonic() - held:.1f} s")
        entries = {d.node_name: d.ip_address for d in clique.daemons}
        for reporter, note in _notes(clique).items():
            assert note["ip"] == entries[reporter]
    finally:
        _signal("daemon-2", signal.SIGCONT)
    await pods.wait_clique(admin, ns, name, lambda c: not _notes(c))
    for pod in ("daemon-0", "daemon-1", "daemon-2"):
        await admin.delete(Pod, pod, namespace=ns)
