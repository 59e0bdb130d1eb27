"""Warm spares (issue 16) on one rack of 3 virtual nodes, the chart-installed driver.

* A CD whose ``compute-domains/warm-nodes`` annotation selects two nodes gets them labelled
  ``compute-domains/warm-for=<uid>``; its daemons run there, register and turn Ready, and both
  entries are Ready in its status, with no workload pod at all (the CD itself says
  ``NoWorkload``). The third node gets nothing.
* A warm node is reserved: its slice advertises the warm CD as holder, another CD's pod pinned
  there is unschedulable; the warm CD's own pod runs there with its channel, and when it goes the
  daemon stays (same pod: the affinity's warm term keeps it).
* Removing the annotation removes the labels and the daemons, the DaemonSet gets its node
  selector back, and the other CD's pod is then placed on the freed node and runs.

With resident agents (``imex.agents=resident``) the node's agent serves its warm label's CD
(its pod is the daemon pod: carries the CD label, registers, Ready), and no DaemonSet exists.
In the per-clique scope the module does not apply (the skip's reason).
* A selector that does not parse: an Event and the ``WarmNodes`` condition, nothing labelled;
  fixed, it labels; deleting the CD removes its warm labels.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from compute_domains.api import computedomain, names, nodemark
from compute_domains.sim import topology
from tests.e2e import helpers
from tests.e2e.conftest import DRIVER_NS

pytestmark = pytest.mark.timeout(900)
SHAPE = topology.Shape(racks=1, nodes_per_rack=3)
if helpers.per_clique():
    pytestmark = [
        pytestmark,
        pytest.mark.skip(
            reason="per-clique scope: every node's shared IMEX is up before any CD asks, so a "
            "spare needs no annotation and the controller ignores compute-domains/warm-nodes "
            "for a per-clique CD (decision 0015); shown by test_per_clique.py::"
            "test_a_pod_joining_on_a_spare_node_runs_at_once_with_its_channel"
        ),
    ]
NODES_MODE = "virtual"
N0, N1, N2 = "gb200-r0-n00", "gb200-r0-n01", "gb200-r0-n02"
CDS = computedomain.ComputeDomainResource


async def _create(admin: AsyncClient, name: str, selector: str | None) -> str:
    annotations = {names.WARM_NODES_ANNOTATION: selector} if selector is not None else None
    obj = await admin.create(
        CDS(
            metadata=ObjectMeta(name=name, namespace="default", annotations=annotations),
            spec={"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-rct"}}},
        )
    )
    return str(obj.metadata.uid)  # type: ignore[union-attr]


async def _warm_labels(admin: AsyncClient) -> dict[str, str]:
    return {
        str(n.metadata.name): (n.metadata.labels or {}).get(names.WARM_FOR_LABEL, "")  # type: ignore[union-attr]
        async for n in admin.list(Node, labels={names.GPU_PRESENT_LABEL: "true"})
    }


async def _daemon_nodes(admin: AsyncClient, uid: str) -> dict[str, str]:
    """Node → daemon pod UID, for the CD's Ready daemon pods."""
    return {
        str(p.spec.nodeName): str(p.metadata.uid)  # type: ignore[union-attr]
        for p in await helpers.daemon_pods(admin, uid)
        if helpers.ready(p) and p.metadata.deletionTimestamp is None  # type: ignore[union-attr]
    }


def _condition(st: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c["type"] == kind), {})


async def _unschedulable(admin: AsyncClient, name: str) -> str:
    pod = await admin.get(Pod, name, namespace="default")
    for c in (pod.status.conditions if pod.status else None) or []:
        if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
            return c.message or "unschedulable"
    return ""


async def test_warm_spares_form_before_any_workload_and_are_reserved(admin: AsyncClient) -> None:
    uid = await _create(admin, "warm", f"kubernetes.io/hostname in ({N1},{N2})")
    cold = await _create(admin, "cold", None)

    async def warm_labelled() -> bool:
        return await _warm_labels(admin) == {N0: "", N1: uid, N2: uid}

    await helpers.within(120, warm_labelled, "warm labels on n01 and n02 only")

    async def entries_ready() -> dict[str, Any] | None:
        st = await helpers.cd_status(admin, "warm")
        nodes = {n["name"]: n["status"] for n in st.get("nodes") or []}
        return st if nodes == {N1: "Ready", N2: "Ready"} else None

    await helpers.within(180, entries_ready, "both warm entries Ready with no workload")
    st = await helpers.cd_status(admin, "warm")
    assert st["status"] == "NotReady" and _condition(st, "Ready")["reason"] == "NoWorkload"
    assert _condition(st, "WarmNodes")["status"] == "True"
    assert _condition(st, "WarmNodes")["message"] == f"2 node(s) warm: {N1}, {N2}"
    daemons = await _daemon_nodes(admin, uid)
    assert set(daemons) == {N1, N2}
    assert not [p async for p in admin.list(Pod, namespace="default")]  # no workload at all

    async def slice_held() -> bool:
        return (await helpers.slice_holders(admin)).get(N1) == {uid}

    await helpers.within(30, slice_held, "n01's slice advertising the warm CD as holder")

    # Another CD's pod pinned to a warm node is not allocated there.
    await admin.create(helpers.channel_pod("cold-1", "cold-rct", node=N1))
    await helpers.within(60, lambda: _unschedulable(admin, "cold-1"), "cold-1 unschedulable")
    assert "cannot allocate all claims" in await _unschedulable(admin, "cold-1")
    # The warm CD's own pod runs there with its channel; when it leaves, the daemon stays.
    await admin.create(helpers.channel_pod("warm-1", "warm-rct", node=N1))
    await helpers.within(120, lambda: helpers.pod_ready(admin, "warm-1"), "warm-1 Ready")
    # Its channel's device node, as `ls -la` lists it: a char device named channel0. Not just
    # the word "channel": ls's "cannot access '/dev/nvidia-caps-imex-channels'" has it too.
    log = await helpers.log_with(admin, "warm-1", ("channel0",))
    assert re.search(r"^c\S*\s.*\schannel0$", log, re.MULTILINE), log
    await admin.delete(Pod, "warm-1", namespace="default")
    await helpers.within(60, lambda: helpers.gone(admin, Pod, "warm-1"), "warm-1 gone")

    async def unlabelled_by_claim() -> bool:
        node = await admin.get(Node, N1)
        return not nodemark.domain_of(node.metadata)  # neither the label nor the annotation

    await helpers.within(30, unlabelled_by_claim, "n01's computeDomain label removed")
    assert await _daemon_nodes(admin, uid) == daemons  # the same daemon pods, still Ready
    assert await _warm_labels(admin) == {N0: "", N1: uid, N2: uid}

    # The annotation removed: labels and daemons go, the node selector is back, cold-1 runs.
    patch = {"metadata": {"annotations": {names.WARM_NODES_ANNOTATION: None}}}
    await admin.patch(CDS, "warm", patch, namespace="default", patch_type=PatchType.MERGE)

    async def unwarmed() -> bool:
        return await _warm_labels(admin) == {N0: "", N1: "", N2: ""}

    await helpers.within(60, unwarmed, "warm labels removed")
    if helpers.resident_agents():
        # The nodes' resident agents served the spares (decision 0014): no DaemonSet to place.
        own = {names.COMPUTE_DOMAIN_LABEL: uid}
        assert [d async for d in admin.list(DaemonSet, namespace=DRIVER_NS, labels=own)] == []
    else:
        ds = await admin.get(DaemonSet, names.daemon_object_name(uid), namespace=DRIVER_NS)
        pod_spec = ds.spec.template.spec  # type: ignore[union-attr]
        assert pod_spec.nodeSelector == {names.COMPUTE_DOMAIN_LABEL: uid}  # type: ignore[union-attr]
        assert pod_spec.affinity is None  # type: ignore[union-attr]

    async def no_daemons() -> bool:
        return not await helpers.daemon_pods(admin, uid)

    await helpers.within(60, no_daemons, "the warm CD's daemons gone")
    await helpers.within(180, lambda: helpers.pod_ready(admin, "cold-1"), "cold-1 Ready on n01")
    assert set(await _daemon_nodes(admin, cold)) == {N1}

    await admin.delete(Pod, "cold-1", namespace="default")
    await helpers.within(60, lambda: helpers.gone(admin, Pod, "cold-1"), "cold-1 gone")
    for name in ("warm", "cold"):
        await admin.delete(CDS, name, namespace="default")
    for name in ("warm", "cold"):
        await helpers.within(60, lambda n=name: helpers.gone(admin, CDS, n), f"CD {name} gone")  # type: ignore[misc]


async def test_a_bad_selector_says_why_and_deleting_the_cd_removes_its_warm_labels(
    admin: AsyncClient,
) -> None:
    uid = await _create(admin, "spare", "kubernetes.io/hostname in gb200-r0-n00")

    async def invalid() -> dict[str, Any]:
        return _condition(await helpers.cd_status(admin, "spare"), "WarmNodes")

    await helpers.within(60, invalid, "the WarmNodes condition")
    cond = await invalid()
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSelector")
    assert "expected '('" in cond["message"] and cond["message"].endswith("no node labelled")

    async def event() -> list[str]:
        return [
            e.message or ""
            async for e in admin.list(Event, namespace="default")
            if e.reason == "InvalidWarmNodes" and e.involvedObject.uid == uid
        ]

    await helpers.within(30, event, "the InvalidWarmNodes Event")
    assert await _warm_labels(admin) == {N0: "", N1: "", N2: ""}

    patch = {
        "metadata": {"annotations": {names.WARM_NODES_ANNOTATION: f"kubernetes.io/hostname={N0}"}}
    }
    await admin.patch(CDS, "spare", patch, namespace="default", patch_type=PatchType.MERGE)

    async def labelled() -> bool:
        return await _warm_labels(admin) == {N0: uid, N1: "", N2: ""}

    await helpers.within(60, labelled, "n00 labelled once the selector parses")
    await admin.delete(CDS, "spare", namespace="default")
    await helpers.within(60, lambda: helpers.gone(admin, CDS, "spare"), "CD spare gone")
    assert await _warm_labels(admin) == {N0: "", N1: "", N2: ""}
