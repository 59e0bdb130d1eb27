"""Status transitions driven by cliques, daemon pods, workload claims and Nodes written by hand.

The test plays the daemons (clique entries, pod readiness), the scheduler (workload claims
allocated to nodes) and the kubelets (Node Leases); the controller must derive every node's
entry, the global status and its Ready condition from them: an entry is Ready only when the
clique, the pod and the Node all say so; a lost Node turns its entry NotReady; a node holding a
workload claim is listed NotReady until its daemon is Ready, also once its daemon pod is gone;
the entry leaves only with its workload, and the clique is pruned without moving the other
indices.

To check that something did *not* change without sleeping, each such step is written together
with a visible change in the same object (e.g. another entry's IP), and the test waits for the
visible change: the controller saw both at once.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Pod

from compute_domains import controller
from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource, Readiness
from tests.integration.controller import objects
from tests.integration.controller.conftest import IMAGE, StartController
from tests.integration.helpers import wait_for

CLIQUE = "c0ffee00-0000-0000-0000-000000000001.7"


def _nodes(cd: Any) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in (cd.get("status") or {}).get("nodes") or []}


def _ready(st: dict[str, Any]) -> dict[str, Any]:
    """The Ready condition of a raw status."""
    found = [c for c in st.get("conditions") or [] if c["type"] == "Ready"]
    assert len(found) == 1, st
    return found[0]


def _reason(st: dict[str, Any]) -> str:
    return str(_ready(st)["reason"])


async def _wait_status(client: AsyncClient, ns: str, name: str, predicate: Any) -> Any:
    return await wait_for(
        client,
        ComputeDomainResource,
        name,
        lambda c: bool(c.get("status")) and predicate(c["status"], _nodes(c)),
        namespace=ns,
        timeout=60,
    )


async def _events(client: AsyncClient, ns: str, uid: str, reason: str) -> list[Any]:
    async def poll() -> list[Any]:
        while True:
            found = [
                e
                async for e in client.list(Event, namespace=ns)
                if e.involvedObject.uid == uid and e.reason == reason
            ]
            if found:
                return found
            await asyncio.sleep(0.25)

    return await asyncio.wait_for(poll(), 60)


async def test_entries_follow_clique_pod_and_node(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    cd = await objects.create_cd(client, "cd-s", user_ns, "cd-s-channel", num_nodes=2)
    uid = cd.metadata.uid
    n1, n2 = f"s1-{uid[:6]}", f"s2-{uid[:6]}"
    async with objects.nodes(client, n1, n2) as (_node1, node2):
        for i, node in enumerate((n1, n2)):
            pod = await objects.workload_pod(client, user_ns, f"w-{i}", node=node)
            await objects.workload_claim(
                client, user_ns, f"c-{i}", domain_uid=uid, node=node, pod=pod
            )
        for node, ip in ((n1, "10.7.0.1"), (n2, "10.7.0.2")):
            await objects.daemon_pod(
                client, driver_ns, domain_uid=uid, node=node, ip=ip, clique_id=CLIQUE, ready=False
            )
            await objects.register(
                client, driver_ns, domain_uid=uid, clique_id=CLIQUE, node=node, ip=ip
            )
        cdo = await _wait_status(
            client, user_ns, "cd-s", lambda s, n: len(n) == 2 and n[n2]["index"] == 1
        )
        nodes = _nodes(cdo)
        assert cdo["status"]["status"] == "NotReady" and _reason(cdo["status"]) == "Forming"
        assert {k: (v["index"], v["status"], v["cliqueID"]) for k, v in nodes.items()} == {
            n1: (0, "NotReady", CLIQUE),
            n2: (1, "NotReady", CLIQUE),
        }
        assert cdo["status"]["totalNodes"] == 2 and cdo["status"]["readyNodes"] == 0

        # Clique says Ready, pod does not: the entry stays NotReady. n2's daemon pod is replaced
        # by one with a new IP: the controller moves its entry there and it keeps its index.
        await objects.set_clique_status(
            client, driver_ns, domain_uid=uid, clique_id=CLIQUE, node=n2, ready=True
        )
        await objects.set_clique_status(
            client, driver_ns, domain_uid=uid, clique_id=CLIQUE, node=n1, ready=True
        )
        await client.delete(Pod, f"daemon-{uid[:8]}-{n2}", namespace=driver_ns, grace_period=0)
        n2_pod = f"daemon-{uid[:8]}-{n2}-b"
        await objects.daemon_pod(
            client,
            driver_ns,
            domain_uid=uid,
            node=n2,
            ip="10.7.0.22",
            clique_id=CLIQUE,
            ready=False,
            name=n2_pod,
        )
        cdo = await _wait_status(
            client, user_ns, "cd-s", lambda s, n: n[n2]["ipAddress"] == "10.7.0.22"
        )
        assert _nodes(cdo)[n1]["status"] == "NotReady"
        assert (_nodes(cdo)[n2]["index"], _nodes(cdo)[n2]["status"]) == (1, "NotReady")
        raw = await client.get(
            ComputeDomainCliqueResource, names.clique_object_name(uid, CLIQUE), namespace=driver_ns
        )
        moved = ComputeDomainClique.from_resource(raw).daemon(n2)
        assert moved is not None and (moved.index, moved.ip_address) == (1, "10.7.0.22")
        assert moved.status is Readiness.NOT_READY  # its Ready was the replaced pod's

        # Pod turns Ready too: now the entry is Ready, the CD not yet (n2 NotReady).
        await objects.set_pod_ready(
            client, driver_ns, f"daemon-{uid[:8]}-{n1}", ip="10.7.0.1", ready=True
        )
        cdo = await _wait_status(client, user_ns, "cd-s", lambda s, n: n[n1]["status"] == "Ready")
        assert cdo["status"]["status"] == "NotReady" and cdo["status"]["readyNodes"] == 1

        # Both Ready: the CD is Ready.
        await objects.set_pod_ready(client, driver_ns, n2_pod, ip="10.7.0.22", ready=True)
        await objects.set_clique_status(
            client, driver_ns, domain_uid=uid, clique_id=CLIQUE, node=n2, ready=True
        )
        cdo = await _wait_status(client, user_ns, "cd-s", lambda s, n: s["status"] == "Ready")
        assert cdo["status"]["readyNodes"] == 2
        assert _ready(cdo["status"])["status"] == "True"
        assert _reason(cdo["status"]) == "AllNodesReady"

        # n2's kubelet stops heart-beating: the node goes NotReady, so does its entry and the CD.
        await node2.stop_heartbeat()
        cdo = await _wait_status(
            client, user_ns, "cd-s", lambda s, n: n[n2]["status"] == "NotReady"
        )
        assert cdo["status"]["status"] == "NotReady"
        assert _reason(cdo["status"]) == "NodeNotReady" and n2 in _ready(cdo["status"])["message"]
        assert _nodes(cdo)[n1]["status"] == "Ready"
        (lost,) = await _events(client, user_ns, uid, "NodeNotReady")
        assert n2 in lost.message and "the node is NotReady" in lost.message

        # n1's daemon pod is gone while its workload stays: n1 stays listed, NotReady, on its
        # index; its clique entry is pruned; n2 keeps index 1.
        await client.delete(Pod, f"daemon-{uid[:8]}-{n1}", namespace=driver_ns, grace_period=0)
        cdo = await _wait_status(
            client, user_ns, "cd-s", lambda s, n: n[n1]["status"] == "NotReady"
        )
        assert (_nodes(cdo)[n1]["index"], _nodes(cdo)[n2]["index"]) == (0, 1)
        assert f"node {n1}: its IMEX daemon pod is gone" in _ready(cdo["status"])["message"]
        pruned = await wait_for(
            client,
            ComputeDomainCliqueResource,
            names.clique_object_name(uid, CLIQUE),
            lambda c: len(c.get("daemons") or []) == 1,
            namespace=driver_ns,
        )
        assert [(d["nodeName"], d["index"]) for d in pruned["daemons"]] == [(n2, 1)]
        assert n1 in _nodes(await client.get(ComputeDomainResource, "cd-s", namespace=user_ns))

        # Its workload leaves: now the entry leaves too.
        await objects.release_claim(client, user_ns, "c-0")
        cdo = await _wait_status(client, user_ns, "cd-s", lambda s, n: n1 not in n)
        assert _nodes(cdo)[n2]["index"] == 1
        await _events(client, user_ns, uid, "NodeLeft")


async def test_forming_is_not_ready_and_a_returning_member_is_announced(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    """numNodes 0: NotReady while no workload exists, and while the nodes the workload was
    placed on have no Ready daemon; Ready once they have; a member whose daemon restarts (as
    after a reboot) is NotReady until it is back, with an Event each way."""
    await start_controller()
    cd = await objects.create_cd(client, "cd-r", user_ns, "cd-r-channel")
    uid = cd.metadata.uid
    n1, n2 = f"r1-{uid[:6]}", f"r2-{uid[:6]}"
    cdo = await _wait_status(client, user_ns, "cd-r", lambda s, n: "conditions" in s)
    assert cdo["status"]["status"] == "NotReady" and _reason(cdo["status"]) == "NoWorkload"
    async with objects.nodes(client, n1, n2):
        for i, node in enumerate((n1, n2)):
            pod = await objects.workload_pod(client, user_ns, f"w-{i}", node=node)
            await objects.workload_claim(
                client, user_ns, f"c-{i}", domain_uid=uid, node=node, pod=pod
            )
        # The workload is placed, no daemon runs yet: both nodes are listed, NotReady, Forming.
        cdo = await _wait_status(client, user_ns, "cd-r", lambda s, n: len(n) == 2)
        assert cdo["status"]["status"] == "NotReady"
        assert {k: (v["status"], v["index"]) for k, v in _nodes(cdo).items()} == {
            n1: ("NotReady", -1),
            n2: ("NotReady", -1),
        }
        ready = _ready(cdo["status"])
        assert ready["reason"] == "Forming" and ready["message"] == (
            f"0 of 2 nodes Ready; waiting for node {n1}: waiting for its IMEX daemon pod; "
            f"node {n2}: waiting for its IMEX daemon pod"
        )
        # n1's daemon is Ready, n2's not yet: still Forming.
        for node, ip, up in ((n1, "10.9.0.1", True), (n2, "10.9.0.2", False)):
            await objects.daemon_pod(
                client, driver_ns, domain_uid=uid, node=node, ip=ip, clique_id=CLIQUE, ready=up
            )
            await objects.register(
                client, driver_ns, domain_uid=uid, clique_id=CLIQUE, node=node, ip=ip, ready=up
            )
        cdo = await _wait_status(
            client, user_ns, "cd-r", lambda s, n: n[n1]["status"] == "Ready" and n[n2]["index"] == 1
        )
        assert cdo["status"]["status"] == "NotReady" and _reason(cdo["status"]) == "Forming"
        await objects.set_pod_ready(
            client, driver_ns, f"daemon-{uid[:8]}-{n2}", ip="10.9.0.2", ready=True
        )
        await objects.set_clique_status(
            client, driver_ns, domain_uid=uid, clique_id=CLIQUE, node=n2, ready=True
        )
        cdo = await _wait_status(client, user_ns, "cd-r", lambda s, n: s["status"] == "Ready")

        # n2's daemon container restarts (a reboot): NotReady until it is Ready again.
        pod = f"daemon-{uid[:8]}-{n2}"
        await objects.set_pod_ready(client, driver_ns, pod, ip="10.9.0.2", ready=False)
        cdo = await _wait_status(client, user_ns, "cd-r", lambda s, n: s["status"] == "NotReady")
        assert _nodes(cdo)[n2]["status"] == "NotReady" and _nodes(cdo)[n2]["index"] == 1
        assert _reason(cdo["status"]) == "NodeNotReady"
        (event,) = await _events(client, user_ns, uid, "NodeNotReady")
        assert n2 in event.message
        await objects.set_pod_ready(client, driver_ns, pod, ip="10.9.0.2", ready=True)
        cdo = await _wait_status(client, user_ns, "cd-r", lambda s, n: s["status"] == "Ready")
        (back,) = await _events(client, user_ns, uid, "NodeReady")
        assert n2 in back.message


async def test_non_fabric_node_entry_comes_from_its_pod(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    cd = await objects.create_cd(client, "cd-p", user_ns, "cd-p-channel")
    uid = cd.metadata.uid
    node = f"plain-{uid[:6]}"
    async with objects.nodes(client, node):
        await objects.workload_claim(client, user_ns, "c-p", domain_uid=uid, node=node)
        await objects.daemon_pod(
            client, driver_ns, domain_uid=uid, node=node, ip="10.8.0.1", clique_id="", ready=False
        )
        # (Listed from the moment its claim is allocated; the pod's IP shows once it is seen.)
        cdo = await _wait_status(
            client, user_ns, "cd-p", lambda s, n: n.get(node, {}).get("ipAddress") == "10.8.0.1"
        )
        assert _nodes(cdo)[node] == {
            "name": node,
            "ipAddress": "10.8.0.1",
            "cliqueID": "",
            "index": -1,
            "status": "NotReady",
        }
        assert cdo["status"]["status"] == "NotReady"
        await objects.set_pod_ready(
            client, driver_ns, f"daemon-{uid[:8]}-{node}", ip="10.8.0.1", ready=True
        )
        cdo = await _wait_status(client, user_ns, "cd-p", lambda s, n: s["status"] == "Ready")
        assert _nodes(cdo)[node]["status"] == "Ready"


async def test_full_clique_is_reported(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller(
        daemon=controller.DaemonSettings(image=IMAGE, max_nodes_per_imex_domain=1)
    )
    cd = await objects.create_cd(client, "cd-f", user_ns, "cd-f-channel")
    uid = cd.metadata.uid
    n1, n2 = f"f1-{uuid.uuid4().hex[:6]}", f"f2-{uuid.uuid4().hex[:6]}"
    async with objects.nodes(client, n1, n2):
        for i, (node, ip) in enumerate(((n1, "10.6.0.1"), (n2, "10.6.0.2"))):
            await objects.workload_claim(client, user_ns, f"c-{i}", domain_uid=uid, node=node)
            await objects.daemon_pod(
                client, driver_ns, domain_uid=uid, node=node, ip=ip, clique_id=CLIQUE, ready=True
            )
        await objects.register(
            client,
            driver_ns,
            domain_uid=uid,
            clique_id=CLIQUE,
            node=n1,
            ip="10.6.0.1",
            ready=True,
            max_nodes=1,
        )
        (event,) = await _events(client, user_ns, uid, "CliqueFull")
        assert event.type == "Warning" and n2 in event.message and CLIQUE in event.message
        # The CD says which node cannot join and why: n2 is listed NotReady with no slot.
        cdo = await _wait_status(
            client,
            user_ns,
            "cd-f",
            lambda s, n: n1 in n and n[n1]["status"] == "Ready" and _reason(s) == "CliqueFull",
        )
        assert cdo["status"]["status"] == "NotReady"
        assert {k: (v["status"], v["index"]) for k, v in _nodes(cdo).items()} == {
            n1: ("Ready", 0),
            n2: ("NotReady", -1),
        }
        assert _ready(cdo["status"])["message"] == (
            f"node {n2} cannot join clique {CLIQUE}: it is full (1 of 1 slots, "
            "maxNodesPerIMEXDomain)"
        )
