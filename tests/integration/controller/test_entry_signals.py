"""A per-domain CD served by resident agents: the controller writes the clique entries' status
from the agents' IMEX readiness signals (docs/decisions/0025), against a real API server.

The test plays the agents: pods in the driver namespace that declare the signal
(``imexsignal.DECLARED``), labelled for the CD with the clique ID, Running (the test writes
their container's ``startedAt``, as a kubelet would) and Ready; and their daemons, which write
only the signal annotation on their own pod. The controller registers each node, then turns its
entry Ready when its signal counts (the CD's status follows the entries as before: its tests are
``test_status*``), NotReady when it stops counting: removed, or left by a
process whose container has since restarted (``kill -9``: the kubelet's new ``startedAt`` is
later than the signal). An agent pod that does not declare the signal (an older agent) writes its
entry's status itself, and the controller leaves it alone.
"""

from __future__ import annotations

import datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from compute_domains.api import agentpods, imexsignal, names
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import Readiness
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController
from tests.integration.helpers import wait_for

CLIQUE = "c0ffee00-0000-0000-0000-0000000000a5.1"
T0 = datetime.datetime.now(datetime.UTC).replace(microsecond=0) - datetime.timedelta(minutes=5)
"""The agents' containers' first run (the controller's clock plays no part)."""


def _stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


async def _agent(
    client: AsyncClient, ns: str, uid: str, node: str, ip: str, *, declared: bool = True
) -> str:
    """An agent pod on ``node`` serving CD ``uid``, Running since ``T0`` and Ready."""
    ref = await objects.owner_ref(client, ns)
    name = f"agent-{node}"
    labels = {
        **agentpods.LABELS,
        names.COMPUTE_DOMAIN_LABEL: uid,
        names.CLIQUE_ID_LABEL: CLIQUE,
    }
    body = {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "annotations": dict(imexsignal.DECLARED) if declared else {},
            "ownerReferences": [ref],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "imex-agent", "image": "registry.k8s.io/pause:3.10"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    await client.create(Pod.from_dict(body))
    await objects.set_pod_ready(client, ns, name, ip=ip, ready=True)
    await _run(client, ns, name, since=T0, restarts=0)
    return name


async def _run(
    client: AsyncClient, ns: str, name: str, *, since: datetime.datetime, restarts: int
) -> None:
    """The kubelet's report of the agent container's current run."""
    container = {
        "name": "imex-agent",
        "image": "registry.k8s.io/pause:3.10",
        "imageID": "",
        "ready": True,
        "restartCount": restarts,
        "state": {"running": {"startedAt": _stamp(since)}},
    }
    patch = {"status": {"containerStatuses": [container]}}
    await client.patch(Pod.Status, name, patch, namespace=ns)


async def _signal(client: AsyncClient, ns: str, name: str, uid: str, at: Any) -> None:
    """The daemon's write: its signal on its own pod (None removes it)."""
    value = None if at is None else imexsignal.encode(at, f"imex-{at:%S}")
    body = {"metadata": {"annotations": {imexsignal.key(uid): value}}}
    await client.patch(Pod, name, body, namespace=ns, patch_type=PatchType.MERGE)


def _statuses(raw: Any) -> dict[str, tuple[int, str]]:
    clique = ComputeDomainClique.from_resource(raw)
    return {d.node_name: (d.index, d.status.value) for d in clique.daemons}


async def _entries(
    client: AsyncClient, ns: str, uid: str, want: dict[str, str]
) -> dict[str, tuple[int, str]]:
    """The clique's entries once every node in ``want`` has that status."""
    name = names.clique_object_name(uid, CLIQUE)

    def holds(raw: Any) -> bool:
        got = _statuses(raw)
        return all(node in got and got[node][1] == s for node, s in want.items())

    raw = await wait_for(client, ComputeDomainCliqueResource, name, holds, namespace=ns)
    return _statuses(raw)


async def test_entries_follow_the_agents_signals_and_a_restart_voids_a_left_signal(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    ns = driver_ns
    await start_controller(imex_agents="resident")
    cd = await objects.create_cd(client, "cd-sig", user_ns, "cd-sig-channel", num_nodes=3)
    uid = cd.metadata.uid
    nodes = [f"sig-{uid[:5]}-{i}" for i in range(3)]
    ips = {n: f"10.8.0.{i + 1}" for i, n in enumerate(nodes)}
    ready, not_ready = Readiness.READY.value, Readiness.NOT_READY.value
    async with objects.nodes(client, *nodes):
        pods = {n: await _agent(client, ns, uid, n, ips[n]) for n in nodes}
        registered = await _entries(client, ns, uid, dict.fromkeys(nodes, not_ready))
        # No signal yet: registered, NotReady.
        # Every daemon's IMEX passes its check: each writes its signal on its own pod only.
        for n in nodes:
            await _signal(client, ns, pods[n], uid, T0 + datetime.timedelta(seconds=3))
        formed = await _entries(client, ns, uid, dict.fromkeys(nodes, ready))
        assert {n: i for n, (i, _) in formed.items()} == {n: i for n, (i, _) in registered.items()}
        # kill -9 of the first node's agent: its container runs again since T0 + 60 s, and the
        # signal its killed process left (T0 + 3 s) no longer counts.
        victim = nodes[0]
        await _run(client, ns, pods[victim], since=T0 + datetime.timedelta(seconds=60), restarts=1)
        await _entries(client, ns, uid, {victim: not_ready, nodes[1]: ready, nodes[2]: ready})
        # The restarted agent's daemon signals again: Ready on the same index.
        await _signal(client, ns, pods[victim], uid, T0 + datetime.timedelta(seconds=62))
        back = await _entries(client, ns, uid, dict.fromkeys(nodes, ready))
        assert back[victim][0] == registered[victim][0]
        # A daemon whose check fails removes its signal: NotReady.
        await _signal(client, ns, pods[nodes[2]], uid, None)
        await _entries(client, ns, uid, {nodes[2]: not_ready, victim: ready})


async def test_an_agent_pod_that_does_not_declare_the_signal_keeps_writing_its_own_status(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    ns = driver_ns
    await start_controller(imex_agents="resident")
    cd = await objects.create_cd(client, "cd-old", user_ns, "cd-old-channel")
    uid = cd.metadata.uid
    old, new = f"old-{uid[:5]}", f"new-{uid[:5]}"
    ready, not_ready = Readiness.READY.value, Readiness.NOT_READY.value
    async with objects.nodes(client, old, new):
        await _agent(client, ns, uid, old, "10.8.1.1", declared=False)
        fresh = await _agent(client, ns, uid, new, "10.8.1.2")
        await _entries(client, ns, uid, {old: not_ready, new: not_ready})
        # The older agent's daemon reports its own entry Ready, as daemons always did.
        await objects.set_clique_status(
            client, ns, domain_uid=uid, clique_id=CLIQUE, node=old, ready=True
        )
        # The controller's next write (the new agent's signal) leaves that status alone.
        await _signal(client, ns, fresh, uid, T0 + datetime.timedelta(seconds=2))
        got = await _entries(client, ns, uid, {new: ready})
        assert got[old][1] == ready
