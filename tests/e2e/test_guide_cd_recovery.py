"""Guide §10 (ComputeDomain 恢复与验证) on §5.2's setup: delete the IMEX daemon pod of worker
k8s134-sd-w1 and watch the ComputeDomain go NotReady, saying why, then Ready again with every
node on the index it had; the workloads see both nodes READY over IMEX again (§10 step 6).

Setup as the guide's §5.2 path B, from ``examples/guide/`` (rebuilt files, see their headers):
§2.4's labels, ``k8s134-nccl-computedomain-test.yaml``, ``k8s134-nccl-same-domain-hostnet.yaml``.

§10's commands select daemon pods with ``-l app.kubernetes.io/managed-by=compute-domain-controller``
(no namespace); NVIDIA's daemon pods (and ours) carry only ``resource.nvidia.com/computeDomain``
and live in the driver's namespace (see ``test_guide_same_domain``), so the drill selects them by
that label there, with the guide's ``--field-selector spec.nodeName=<worker>``; the rest of the
commands are the guide's (``kubectl delete`` of that pod, graceful).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lightkube import AsyncClient

from compute_domains.api import computedomain, names
from compute_domains.sim import state, topology
from tests.e2e import guide_steps, helpers
from tests.e2e.conftest import DRIVER_NS

pytestmark = pytest.mark.timeout(600)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
CD = "nccl-computedomain-test"
PODS = ("nccl-sd-host-1", "nccl-sd-host-2")
WORKERS = tuple(topology.node_name(0, i) for i in range(2))


def _verdict(doc: dict[str, Any]) -> tuple[str, str, str]:
    st = doc.get("status") or {}
    cond = next((c for c in st.get("conditions") or [] if c["type"] == "Ready"), {})
    return st.get("status", "-"), cond.get("reason", "-"), cond.get("message", "")


async def _record(admin: AsyncClient, seen: list[tuple[str, str, str]]) -> None:
    """Every status the CD is written with, in order (a watch: no short NotReady is missed)."""
    async for _, obj in admin.watch(
        computedomain.ComputeDomainResource, namespace="default", fields={"metadata.name": CD}
    ):
        seen.append(_verdict(obj.to_dict()))  # type: ignore[no-untyped-call]


async def _indices(admin: AsyncClient) -> dict[str, int]:
    st = await helpers.cd_status(admin, CD)
    return {n["name"]: n["index"] for n in st.get("nodes") or []}


async def _peers_ready(admin: AsyncClient) -> None:
    for pod in PODS:
        await guide_steps.reaches_peers(admin, pod, peers=1)


async def test_guide_10_daemon_pod_deleted_cd_recovers_on_the_same_indices(
    admin: AsyncClient, rack_sim: state.SimPaths
) -> None:
    if helpers.resident_agents() or helpers.per_clique():
        pytest.skip("§10 deletes a CD's own daemon pod: the per-CD DaemonSet shape only")
    guide_steps.label(rack_sim, dict.fromkeys(WORKERS, "same-domain"))
    guide_steps.apply(
        rack_sim, "k8s134-nccl-computedomain-test.yaml", "k8s134-nccl-same-domain-hostnet.yaml"
    )
    # 1. READY.
    await guide_steps.running(admin, PODS)
    await helpers.within(120, lambda: guide_steps.cd_ready(admin, CD, 2), f"{CD} Ready")
    await _peers_ready(admin)
    before = await _indices(admin)
    assert sorted(before) == sorted(WORKERS), before
    obj = await admin.get(computedomain.ComputeDomainResource, CD, namespace="default")
    uid = str(obj.metadata.uid)  # type: ignore[union-attr]

    # 2./3. The daemon pod on sd-w1, deleted.
    selector = f"{names.COMPUTE_DOMAIN_LABEL}={uid}"
    daemon = helpers.kubectl(
        rack_sim, "get", "pods", "-n", DRIVER_NS, "-l", selector,
        "--field-selector", f"spec.nodeName={WORKERS[1]}", "-o", "name",
    ).split()  # fmt: skip
    assert len(daemon) == 1, daemon
    seen: list[tuple[str, str, str]] = []
    recorder = asyncio.create_task(_record(admin, seen))
    try:
        await helpers.within(30, lambda: _has(seen), "the watch's first event")
        helpers.kubectl(rack_sim, "delete", "-n", DRIVER_NS, daemon[0])

        # 4./5. A new daemon pod on sd-w1, the CD READY again on the same indices.
        async def healed() -> bool:
            pods = await helpers.daemon_pods(admin, uid)
            fresh = [
                p
                for p in pods
                if p.spec is not None
                and p.spec.nodeName == WORKERS[1]
                and f"pod/{p.metadata.name}" != daemon[0]  # type: ignore[union-attr]
                and helpers.ready(p)
            ]
            return bool(fresh) and await guide_steps.cd_ready(admin, CD, 2)

        await helpers.within(180, healed, f"a new daemon on {WORKERS[1]} and {CD} Ready")
        assert await _indices(admin) == before
    finally:
        recorder.cancel()
    # Ready, then NotReady saying which node and why (its daemon gone, then not Ready yet),
    # then Ready: e.g. ('NotReady', 'NodeNotReady', '1 of 2 nodes Ready; node gb200-r0-n01: its
    # IMEX daemon has not registered yet').
    assert seen[0][:2] == ("Ready", "AllNodesReady"), seen
    not_ready = [v for v in seen if v[0] == "NotReady"]
    assert not_ready, seen
    for _, reason, message in not_ready:
        assert reason == "NodeNotReady", seen
        assert message.startswith(f"1 of 2 nodes Ready; node {WORKERS[1]}: its IMEX daemon"), seen
    assert seen[-1][:2] == ("Ready", "AllNodesReady"), seen
    # 6. The MNNVL check again: both pods see both nodes READY.
    await _peers_ready(admin)
    guide_steps.delete(
        rack_sim, "k8s134-nccl-same-domain-hostnet.yaml", "k8s134-nccl-computedomain-test.yaml"
    )


async def _has(seen: list[Any]) -> bool:
    return bool(seen)
