"""Guide §9 (64+8 备用容量管理) on two nodes of one rack, from the files in ``examples/guide/``
applied with ``kubectl apply -f`` as they are.

The guide names its §9 files but prints none of them: the files are rebuilt from the guide's
text (each header says from what, and which choices are ours). The state the guide states, step
by step:

- §9.1: ``kubectl get priorityclass`` lists gpu-training (1000) and gpu-placeholder (-1);
- §9.2: the placeholders (``-l app=gpu-placeholder``) run on 2 nodes, holding all their GPUs;
- §9.3: ``training-preempt-test`` (gpu-training, 4 GPUs, a ComputeDomain channel) runs by
  preempting one placeholder: it lands on that placeholder's node, holds the CD's channel and the
  CD is Ready; the preempted placeholder's replacement stays Pending (preemptionPolicy: Never,
  it cannot preempt back);
- §9.4: ``kubectl cordon`` + ``kubectl drain --ignore-daemonsets --delete-emptydir-data
  --force`` of the node of the other placeholder evicts it (no free node: it waits Pending) while
  the training pod and the CD stay as they are; ``kubectl uncordon`` lets a placeholder run
  there again.
"""

from __future__ import annotations

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.sim import state, topology
from tests.e2e import guide_steps, helpers

pytestmark = pytest.mark.timeout(600)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
CD = "spare-capacity-test"
TRAIN = "training-preempt-test"
NODES = tuple(topology.node_name(0, i) for i in range(2))


async def _placeholders(admin: AsyncClient) -> list[Pod]:
    return [
        p
        async for p in admin.list(Pod, namespace="default", labels={"app": "gpu-placeholder"})
        if p.metadata is not None and not p.metadata.deletionTimestamp
    ]


async def _placed(admin: AsyncClient) -> dict[str, str | None]:
    """Placeholder pod → node it runs on (Ready), or None while it is not running."""
    return {
        str(p.metadata.name): (p.spec.nodeName if helpers.ready(p) and p.spec else None)  # type: ignore[union-attr]
        for p in await _placeholders(admin)
    }


async def test_guide_9_priority_placeholders_preemption_and_drain(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    # §9.1
    guide_steps.apply(rack_sim, "spare-capacity-priority.yaml")
    listed = helpers.kubectl(rack_sim, "get", "priorityclass", "--no-headers")
    values = {line.split()[0]: line.split()[1] for line in listed.splitlines()}
    assert values.get("gpu-training") == "1000" and values.get("gpu-placeholder") == "-1", listed

    # §9.2
    guide_steps.apply(rack_sim, "spare-capacity-placeholder.yaml")

    async def on_both() -> dict[str, str | None] | None:
        placed = await _placed(admin)
        return placed if sorted(n for n in placed.values() if n) == sorted(NODES) else None

    await helpers.within(120, on_both, "a placeholder running on each node")
    first = await _placed(admin)

    # §9.3
    guide_steps.apply(rack_sim, "spare-capacity-training-job.yaml")
    await guide_steps.running(admin, (TRAIN,))
    node = await guide_steps.node_of(admin, TRAIN)
    await helpers.within(60, lambda: guide_steps.cd_ready(admin, CD, 1), f"{CD} Ready")
    channel = await helpers.cd_channel(admin, CD, node)
    peers = helpers.imex_domain_nodes(cd_nodes=1, clique_nodes=len(NODES)) - 1
    await guide_steps.reaches_peers(admin, TRAIN, peers=peers, channel=channel)
    (victim,) = [name for name, n in first.items() if n == node]
    (kept,) = [name for name, n in first.items() if n != node]

    async def one_preempted() -> dict[str, str | None] | None:
        placed = await _placed(admin)
        # The victim is gone; its replacement waits (it may not preempt the training pod).
        ok = (
            victim not in placed
            and len(placed) == 2
            and placed.get(kept) == NODES[1 - NODES.index(node)]
            and sum(1 for n in placed.values() if n is None) == 1
        )
        return placed if ok else None

    await helpers.within(60, one_preempted, f"{victim} preempted, its replacement Pending")
    pending = [p for p in await _placeholders(admin) if not helpers.ready(p)]
    assert all(p.spec is not None and not p.spec.nodeName for p in pending), pending

    # §9.4: the other placeholder's node, cordoned and drained, then uncordoned.
    spare = NODES[1 - NODES.index(node)]
    helpers.kubectl(rack_sim, "cordon", spare)
    helpers.kubectl(
        rack_sim, "drain", spare, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
        "--timeout=120s",
    )  # fmt: skip

    async def none_running() -> dict[str, str | None] | None:
        placed = await _placed(admin)
        return placed if len(placed) == 2 and not any(placed.values()) else None

    await helpers.within(60, none_running, "both placeholders Pending after the drain")
    assert await helpers.pod_ready(admin, TRAIN)
    assert await guide_steps.cd_ready(admin, CD, 1)
    helpers.kubectl(rack_sim, "uncordon", spare)

    async def back() -> dict[str, str | None] | None:
        placed = await _placed(admin)
        running = [n for n in placed.values() if n]
        return placed if running == [spare] and len(placed) == 2 else None

    await helpers.within(120, back, f"a placeholder running on {spare} again")
    assert await helpers.pod_ready(admin, TRAIN)
    guide_steps.delete(
        rack_sim,
        "spare-capacity-training-job.yaml",
        "spare-capacity-placeholder.yaml",
        "spare-capacity-priority.yaml",
    )
