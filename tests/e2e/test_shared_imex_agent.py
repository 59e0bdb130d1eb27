"""The clique's shared IMEX run by resident agents (issue 26, per-clique scope) on two virtual
nodes of one clique.

The test stands in for the kubelet plugin: it labels the nodes ``compute-domains/shared-imex=on``
by hand and writes another writer's annotation on the registry itself (not a channel key: the
controller removes channel annotations of CDs that do not exist, rightly). Shown:

* both agents register in ``shared-imex.<clique>`` (no CD label, no owners) with distinct
  indices, and both entries turn Ready; each node's shared IMEX sees both nodes READY;
* an annotation another writer puts on the registry survives the agents' writes;
* changes that are no peer change (another writer's annotation on the Nodes and on the registry, an
  entry's status flipped by someone else) neither restart an IMEX nor send it SIGUSR1 (same
  start count, same SIGUSR1 count, in the agents' logs);
* removing the label on one node stops its IMEX and leaves its entry NotReady on the same
  index; re-adding it brings the node back, Ready, on that index, with no restart or signal
  of the other node's IMEX.

The agent's Role (the chart's) grants ``create`` and ``update`` on cliques for the registry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from compute_domains.api import clique, names, sharedimex
from compute_domains.api.computedomain import Readiness
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_seed_example import _eventually
from tests.integration.daemon import pods as imex_query

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
NODES_MODE = "virtual"
A, B = "gb200-r0-n00", "gb200-r0-n01"
AGENT_LABELS = {"app.kubernetes.io/component": "imex-agent"}
CHANNEL = "example.com/another-writer"
"""Another writer's annotation (the plugin's channel numbers are written the same way)."""
STARTS = re.compile(r"started \S*nvidia-imex \(pid \d+\)")
SIGNALS = "sent SIGUSR1 to pid"


@pytest.fixture(scope="module")
def shared_sim(rack_sim: state.SimPaths) -> Iterator[state.SimPaths]:
    """The sim with resident agents."""
    helpers.upgrade(rack_sim, "imex.agents=resident")
    yield rack_sim


async def _agent(admin: AsyncClient, node: str) -> Pod:
    found = [
        p
        async for p in admin.list(Pod, namespace=DRIVER_NS, labels=AGENT_LABELS)
        if p.spec is not None and p.spec.nodeName == node
    ]
    assert len(found) == 1, found
    return found[0]


def _name(pod: Pod) -> str:
    assert pod.metadata is not None and pod.metadata.name
    return pod.metadata.name


def _ip(pod: Pod) -> str:
    assert pod.status is not None and pod.status.podIP
    return pod.status.podIP


async def _label(admin: AsyncClient, node: str, on: bool) -> None:
    value = sharedimex.SHARED_IMEX_ON if on else None
    body = {"metadata": {"labels": {sharedimex.SHARED_IMEX_LABEL: value}}}
    await admin.patch(Node, node, body, patch_type=PatchType.MERGE)


async def _annotate(admin: AsyncClient, kind: Any, name: str, value: str | None, **kw: Any) -> None:
    body = {"metadata": {"annotations": {CHANNEL: value}}}
    await admin.patch(kind, name, body, patch_type=PatchType.MERGE, **kw)


async def _registry(admin: AsyncClient, name: str) -> clique.ComputeDomainClique | None:
    found = [
        c
        async for c in admin.list(clique.ComputeDomainCliqueResource, namespace=DRIVER_NS)
        if c.metadata is not None and c.metadata.name == name
    ]
    return clique.ComputeDomainClique.from_resource(found[0]) if found else None


def _entries(reg: clique.ComputeDomainClique | None) -> dict[str, tuple[int, Readiness]]:
    return {d.node_name: (d.index, d.status) for d in reg.daemons} if reg is not None else {}


async def _ready_hosts(sim: state.SimPaths, ip: str) -> set[str]:
    """The hosts the shared IMEX at ``ip`` reports READY (``nvidia-imex-ctl -N -j``)."""
    report = await imex_query.domain(sim.root, ip)
    return {
        str(n.get("host"))
        for n in (report.get("nodes") or {}).values()
        if n.get("status") == "READY"
    }


async def _counts(admin: AsyncClient, pod: Pod) -> tuple[int, int]:
    """(IMEX starts, SIGUSR1 sent) in the agent's log."""
    log = await helpers.log_of(admin, _name(pod), namespace=DRIVER_NS)
    return len(STARTS.findall(log)), log.count(SIGNALS)


async def test_agents_run_the_cliques_shared_imex(
    admin: AsyncClient, shared_sim: state.SimPaths
) -> None:

    async def agents_ready() -> bool:
        found = [p async for p in admin.list(Pod, namespace=DRIVER_NS, labels=AGENT_LABELS)]
        return len(found) == 2 and all(helpers.ready(p) for p in found)

    await _eventually(agents_ready, 180, "an agent pod Ready on each node")
    agent_a, agent_b = await _agent(admin, A), await _agent(admin, B)
    node_a = await admin.get(Node, A)
    assert node_a.metadata is not None
    clique_id = (node_a.metadata.labels or {})[names.GPU_CLIQUE_LABEL]
    name = sharedimex.registry_name(clique_id)

    # Node A first: it makes the registry; the plugin's channel annotation lands on it; then B.
    await _label(admin, A, True)
    await _eventually(lambda: _registry(admin, name), 60, f"registry {name}")
    await _annotate(admin, clique.ComputeDomainCliqueResource, name, "1", namespace=DRIVER_NS)

    async def a_started() -> bool:
        return (await _counts(admin, agent_a))[0] == 1

    await _eventually(a_started, 60, "A's shared IMEX started")
    await _label(admin, B, True)

    async def both_ready() -> dict[str, tuple[int, Readiness]] | None:
        entries = _entries(await _registry(admin, name))
        ok = set(entries) == {A, B} and all(s is Readiness.READY for _, s in entries.values())
        return entries if ok else None

    entries = await _eventually(both_ready, 120, "both entries Ready")
    indices = {node: index for node, (index, _) in entries.items()}
    assert sorted(indices.values()) == [0, 1]
    reg = await _registry(admin, name)
    assert reg is not None
    labels = reg.metadata.labels or {}
    assert labels.get(sharedimex.SCOPE_LABEL) == sharedimex.Scope.PER_CLIQUE.value
    assert labels.get(names.CLIQUE_ID_LABEL) == clique_id
    assert names.COMPUTE_DOMAIN_LABEL not in labels
    assert not reg.metadata.ownerReferences
    assert (reg.metadata.annotations or {}).get(CHANNEL) == "1"
    assert {d.ip_address for d in reg.daemons} == {_ip(agent_a), _ip(agent_b)}

    # Each node's shared IMEX has the other as a READY peer, under the clique's own names.
    domain = sharedimex.registry_name(clique_id)
    hosts = {names.imex_dns_name(i, domain) for i in indices.values()}
    for pod in (agent_a, agent_b):

        async def sees_both(ip: str = _ip(pod)) -> bool:
            return await _ready_hosts(shared_sim, ip) == hosts

        await _eventually(sees_both, 90, f"the shared IMEX at {_ip(pod)} seeing {hosts}")
    # A started alone and was signalled once when B's name arrived; B started with both.
    assert await _counts(admin, agent_a) == (1, 1)
    assert await _counts(admin, agent_b) == (1, 0)

    # No peer change: a CD attaching (channel annotations on the Nodes and the registry, then
    # gone) and an entry's status written by someone else, which A sets right again. A's
    # rewrite comes after the annotation changes in its watch: it has seen them all.
    for node in (A, B):
        await _annotate(admin, Node, node, "5")
    await _annotate(admin, clique.ComputeDomainCliqueResource, name, "2", namespace=DRIVER_NS)
    position = next(k for k, d in enumerate(reg.daemons) if d.node_name == A)
    await admin.patch(
        clique.ComputeDomainCliqueResource,
        name,
        [
            {"op": "test", "path": f"/daemons/{position}/nodeName", "value": A},
            {"op": "replace", "path": f"/daemons/{position}/status", "value": "NotReady"},
        ],
        namespace=DRIVER_NS,
        patch_type=PatchType.JSON,
    )
    await _eventually(both_ready, 60, "A's entry Ready again (A rewrote its status)")
    for node in (A, B):
        await _annotate(admin, Node, node, None)
    reg = await _registry(admin, name)
    assert reg is not None and (reg.metadata.annotations or {}).get(CHANNEL) == "2"
    assert await _counts(admin, agent_a) == (1, 1)
    assert await _counts(admin, agent_b) == (1, 0)

    # B's label goes: its IMEX stops, its entry stays NotReady on its index; A is untouched.
    await _label(admin, B, False)

    async def b_stopped() -> bool:
        entries = _entries(await _registry(admin, name))
        down = not await _ready_hosts(shared_sim, _ip(agent_b))  # no IMEX answers there
        return entries.get(B) == (indices[B], Readiness.NOT_READY) and down

    await _eventually(b_stopped, 60, "B's IMEX stopped and its entry NotReady on its index")
    assert _entries(await _registry(admin, name))[A] == (indices[A], Readiness.READY)
    await _eventually(
        lambda: helpers.pod_ready(admin, _name(agent_b), DRIVER_NS),
        60,
        "B's agent Ready while it runs nothing",
    )

    # Back: the same index, Ready, both seen by A; A's IMEX neither restarted nor signalled.
    await _label(admin, B, True)
    entries = await _eventually(both_ready, 120, "B's entry Ready again")
    assert {node: index for node, (index, _) in entries.items()} == indices

    async def a_sees_both() -> bool:
        return await _ready_hosts(shared_sim, _ip(agent_a)) == hosts

    await _eventually(a_sees_both, 90, "A's shared IMEX seeing B again")
    assert await _counts(admin, agent_a) == (1, 1)
    assert await _counts(admin, agent_b) == (2, 0)
    reg = await _registry(admin, name)
    assert reg is not None and (reg.metadata.annotations or {}).get(CHANNEL) == "2"
    assert {d.ip_address for d in reg.daemons} == {_ip(agent_a), _ip(agent_b)}

    for node in (A, B):
        await _label(admin, node, False)
