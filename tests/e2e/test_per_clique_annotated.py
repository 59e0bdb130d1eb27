"""Issue 26's per-clique scope end to end: two CDs share both nodes of a clique, one channel each.

NEEDS THE WHOLE SCOPE: the kubelet plugin's part (branch ``pluginshared``), the resident agent
running the clique's shared IMEX on ``compute-domains/shared-imex=on`` and registering in
``shared-imex.<cliqueID>`` (``agentshared``), and the controller building a per-clique CD's
workload template with ``sharedimex.channel_selector()`` (``ctrlshared``). It fails until all
three are merged. The test sets each CD's ``compute-domains/imex-scope=perClique`` itself (the
controller keeps a user's value).

Two CDs, ``a`` and ``b``, each with one pod on each of the two nodes: every pod sees exactly one
channel, its CD's, never channel 0 and never the other CD's; the clique's registry and both
Nodes carry each CD's number; each pod reaches the shared IMEX through ``/imexd`` (both nodes
READY). Deleting ``a`` removes its Node annotations and its registry number, keeps the nodes
in the per-clique scope (the label stays), and leaves ``b``'s pods running, untouched.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.api import computedomain, sharedimex
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.sim import state, topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS
from tests.e2e.test_seed_example import _eventually, _follow_log

pytestmark = pytest.mark.timeout(1200)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
NODES_MODE = "virtual"
NODES = [s.name for s in topology.nodes(SHAPE) if s.rack is not None]
CLIQUE = next(s.clique for s in topology.nodes(SHAPE) if s.rack is not None)
_CHANNEL = re.compile(r"/dev/nvidia-caps-imex-channels/channel(\d+)")


@pytest.fixture(scope="module")
def resident(rack_sim: state.SimPaths) -> Iterator[state.SimPaths]:
    helpers.upgrade(rack_sim, "imex.agents=resident")
    yield rack_sim


async def _per_clique_cd(admin: AsyncClient, name: str) -> str:
    obj = await admin.create(
        computedomain.ComputeDomainResource(
            metadata=ObjectMeta(
                name=name,
                namespace="default",
                annotations={sharedimex.SCOPE_ANNOTATION: sharedimex.Scope.PER_CLIQUE.value},
            ),
            spec={"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-rct"}}},
        )
    )
    return str(obj.metadata.uid)  # type: ignore[union-attr]


async def _node_channels(admin: AsyncClient) -> dict[str, dict[str, int]]:
    out = {}
    for node in NODES:
        n = await admin.get(Node, node)
        out[node] = sharedimex.channels(n.metadata.annotations if n.metadata else None)
    return out


async def _labels(admin: AsyncClient) -> set[str | None]:
    out = set()
    for node in NODES:
        n = await admin.get(Node, node)
        out.add(
            ((n.metadata.labels if n.metadata else None) or {}).get(sharedimex.SHARED_IMEX_LABEL)
        )
    return out


def _uid(pod: Pod) -> str:
    return str(pod.metadata.uid if pod.metadata else "")


async def _registry(admin: AsyncClient) -> dict[str, int]:
    obj = await admin.get(
        ComputeDomainCliqueResource, sharedimex.registry_name(CLIQUE), namespace=DRIVER_NS
    )
    return sharedimex.channels(obj.metadata.annotations if obj.metadata else None)


async def test_two_per_clique_cds_share_the_clique_each_pod_with_its_own_channel(
    admin: AsyncClient, resident: state.SimPaths
) -> None:
    uids = {cd: await _per_clique_cd(admin, cd) for cd in ("a", "b")}
    pods = {f"{cd}{i}": (cd, node) for cd in uids for i, node in enumerate(NODES)}
    for pod, (cd, node) in pods.items():
        await admin.create(
            helpers.channel_pod(pod, f"{cd}-rct", command="mnnvl-workload", node=node)
        )

    async def running() -> bool:
        got = [await admin.get(Pod, p, namespace="default") for p in pods]
        return all(helpers.ready(p) for p in got)

    await _eventually(running, 300, "every pod of both CDs running")
    seen: dict[str, set[int]] = {cd: set() for cd in uids}
    for pod, (cd, _node) in pods.items():
        log = await _follow_log(admin, pod, "configured nodes READY")
        line = next(x for x in log.splitlines() if "IMEX channels:" in x)
        assert "IMEX channels: 1:" in line, line
        seen[cd] |= {int(n) for n in _CHANNEL.findall(line)}
        assert "2/18 configured nodes READY" in log, log
    assert all(len(v) == 1 for v in seen.values()), seen
    channel = {cd: next(iter(v)) for cd, v in seen.items()}
    assert channel["a"] != channel["b"] and 0 not in channel.values(), channel
    assert await _registry(admin) == {uids[cd]: channel[cd] for cd in uids}
    want = {uids[cd]: channel[cd] for cd in uids}
    assert await _node_channels(admin) == {node: want for node in NODES}
    assert await _labels(admin) == {sharedimex.SHARED_IMEX_ON}

    b_pods = {p: _uid(await admin.get(Pod, p, namespace="default")) for p in ("b0", "b1")}
    for pod in ("a0", "a1"):
        await admin.delete(Pod, pod, namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, "a", namespace="default")

    async def a_gone() -> bool:
        marks = await _node_channels(admin)
        return all(m == {uids["b"]: channel["b"]} for m in marks.values()) and (
            await _registry(admin) == {uids["b"]: channel["b"]}
        )

    await _eventually(a_gone, 180, "a's channel gone from both nodes and the registry")
    assert await _labels(admin) == {sharedimex.SHARED_IMEX_ON}, "the shared IMEX stays"
    for pod, uid in b_pods.items():
        p = await admin.get(Pod, pod, namespace="default")
        assert _uid(p) == uid and helpers.ready(p)
    for pod in ("b0", "b1"):
        await admin.delete(Pod, pod, namespace="default")
    await admin.delete(computedomain.ComputeDomainResource, "b", namespace="default")
