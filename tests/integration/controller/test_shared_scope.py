"""The per-clique isolation scope against a real API server: scope admission, templates, status
from Nodes and shared registries, and teardown of a CD's channels.

The test plays the kubelet plugin (a Node's ``compute-domains/channel.<cdUID>`` annotation and
``compute-domains/shared-imex=on`` label, the CD's channel in the registry) and the resident
agents (their entries in the registry ``shared-imex.<cliqueID>``, ``api.sharedimex``), as the
other controller tests play the daemons.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.resource_v1 import ResourceClaimTemplate
from lightkube.types import PatchType

from compute_domains.api import names, sharedimex
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from tests.integration.controller import objects
from tests.integration.controller.conftest import StartController, stop
from tests.integration.helpers import wait_for

CLIQUE = "c0ffee00-0000-0000-0000-000000000026.4"
SHARED_CEL = sharedimex.channel_selector()
RESIDENT: dict[str, Any] = {
    "imex_agents": "resident",
    "default_imex_scope": sharedimex.Scope.PER_CLIQUE,
}


async def _cd(
    client: AsyncClient, name: str, ns: str, *, scope: str | None = None, mode: str = "Single"
) -> Any:
    body = objects.cd_body(name, ns, f"{name}-channel", mode=mode).to_dict()
    if scope is not None:
        body["metadata"]["annotations"] = {sharedimex.SCOPE_ANNOTATION: scope}
    return await client.create(ComputeDomainResource.from_dict(body))


def _ready(cd: Any) -> dict[str, Any]:
    (found,) = [c for c in cd["status"]["conditions"] if c["type"] == "Ready"]
    return dict(found)


def _message(cd: Any) -> str:
    """The Ready condition's message, or "" while the status has none."""
    found = [c for c in cd["status"].get("conditions") or [] if c["type"] == "Ready"]
    return str(found[0].get("message", "")) if found else ""


def _nodes(cd: Any) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in (cd.get("status") or {}).get("nodes") or []}


async def _status(client: AsyncClient, ns: str, name: str, predicate: Any) -> Any:
    return await wait_for(
        client,
        ComputeDomainResource,
        name,
        lambda c: bool(c.get("status")) and predicate(c),
        namespace=ns,
        timeout=60,
    )


async def _event(client: AsyncClient, ns: str, uid: str, reason: str) -> Any:
    async def poll() -> Any:
        while True:
            async for e in client.list(Event, namespace=ns):
                if e.involvedObject.uid == uid and e.reason == reason:
                    return e
            await asyncio.sleep(0.25)

    return await asyncio.wait_for(poll(), 60)


async def _template(client: AsyncClient, ns: str, name: str) -> Any | None:
    try:
        return await client.get(ResourceClaimTemplate, name, namespace=ns)
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise


def _cel(rct: Any) -> str:
    (request,) = rct.spec.spec.devices.requests
    (selector,) = request.exactly.selectors
    return str(selector.cel.expression)


async def _registry(
    client: AsyncClient, ns: str, channels: dict[str, int], entries: list[tuple[str, str, str]]
) -> None:
    """What the plugin (channels) and the agents (entries: node, IP, status) leave in the
    shared registry of ``CLIQUE``: created, or its entries and channels replaced."""
    name = sharedimex.registry_name(CLIQUE)
    daemons = [
        {"nodeName": n, "ipAddress": ip, "cliqueID": CLIQUE, "index": i, "status": st}
        for i, (n, ip, st) in enumerate(entries)
    ]
    annotations = {sharedimex.channel_key(uid): str(ch) for uid, ch in channels.items()}
    try:
        current = await client.get(ComputeDomainCliqueResource, name, namespace=ns)
    except ApiError:
        current = None
    if current is None:
        body = {
            "apiVersion": names.API_VERSION,
            "kind": names.CLIQUE_KIND,
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {
                    sharedimex.SCOPE_LABEL: sharedimex.Scope.PER_CLIQUE.value,
                    names.CLIQUE_ID_LABEL: CLIQUE,
                },
                "annotations": annotations,
            },
            "daemons": daemons,
        }
        await client.create(ComputeDomainCliqueResource(**body))
        return
    patch = {"metadata": {"annotations": annotations}, "daemons": daemons}
    await client.patch(
        ComputeDomainCliqueResource, name, patch, namespace=ns, patch_type=PatchType.MERGE
    )


async def _serve(client: AsyncClient, node: str, channels: dict[str, int]) -> None:
    """What the plugin writes on a Node that prepared these per-clique CDs' claims."""
    annotations = {sharedimex.channel_key(uid): str(ch) for uid, ch in channels.items()}
    labels = {sharedimex.SHARED_IMEX_LABEL: sharedimex.SHARED_IMEX_ON}
    await client.patch(Node, node, {"metadata": {"labels": labels, "annotations": annotations}})


async def test_scope_is_written_at_creation_and_decides_the_template(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    """A CD without the annotation gets the default (perClique), a user's perDomain is kept;
    each template selects for its scope; no per-CD daemon objects for either; a later edit of
    the annotation is refused (condition, Event) and the fixed scope served."""
    await start_controller(**RESIDENT)
    shared = await _cd(client, "cd-sh", user_ns)
    own = await _cd(client, "cd-own", user_ns, scope="perDomain")
    rcts = {}
    for name in ("cd-sh", "cd-own"):
        rcts[name] = await wait_for(
            client, ResourceClaimTemplate, f"{name}-channel", lambda _t: True, namespace=user_ns
        )
    got = await client.get(ComputeDomainResource, "cd-sh", namespace=user_ns)
    annotations = got.metadata.annotations or {}
    assert annotations[sharedimex.SCOPE_ANNOTATION] == "perClique"
    assert annotations[sharedimex.FIXED_SCOPE_ANNOTATION] == "perClique"
    assert names.FINALIZER in (got.metadata.finalizers or [])
    got = await client.get(ComputeDomainResource, "cd-own", namespace=user_ns)
    assert got.metadata.annotations[sharedimex.SCOPE_ANNOTATION] == "perDomain"
    assert got.metadata.annotations[sharedimex.FIXED_SCOPE_ANNOTATION] == "perDomain"
    assert _cel(rcts["cd-sh"]) == SHARED_CEL
    assert _cel(rcts["cd-own"]) == names.channel_selector(own.metadata.uid)
    assert [d async for d in client.list(DaemonSet, namespace=driver_ns)] == []

    await client.patch(
        ComputeDomainResource,
        "cd-sh",
        {"metadata": {"annotations": {sharedimex.SCOPE_ANNOTATION: "perDomain"}}},
        namespace=user_ns,
        patch_type=PatchType.MERGE,
    )
    cdo = await _status(
        client,
        user_ns,
        "cd-sh",
        lambda c: any(x["type"] == "ImexScope" for x in c["status"]["conditions"]),
    )
    (cond,) = [x for x in cdo["status"]["conditions"] if x["type"] == "ImexScope"]
    assert (cond["status"], cond["reason"]) == ("False", "ScopeChangeRefused")
    assert "fixed at creation" in cond["message"] and "delete the ComputeDomain" in cond["message"]
    assert cdo.metadata.annotations[sharedimex.FIXED_SCOPE_ANNOTATION] == "perClique"
    event = await _event(client, user_ns, shared.metadata.uid, "ImexScopeFixed")
    assert event.type == "Warning" and "fixed at creation" in event.message
    rct = await client.get(ResourceClaimTemplate, "cd-sh-channel", namespace=user_ns)
    assert _cel(rct) == SHARED_CEL


async def test_all_channels_unknown_scopes_and_per_clique_without_agents_are_refused(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller(**RESIDENT)
    every = await _cd(client, "cd-all", user_ns, mode="All")
    bad = await _cd(client, "cd-bad", user_ns, scope="perNode")
    cdo = await _status(client, user_ns, "cd-all", lambda c: True)
    ready = _ready(cdo)
    assert (cdo["status"]["status"], ready["reason"]) == (
        "NotReady",
        "AllocationModeAllNotIsolated",
    )
    assert "all 2048 IMEX channels" in ready["message"]
    assert "every other ComputeDomain" in ready["message"] and "Single" in ready["message"]
    event = await _event(client, user_ns, every.metadata.uid, "AllocationModeAllNotIsolated")
    assert event.type == "Warning" and "cd-all-channel is not created" in event.message
    assert await _template(client, user_ns, "cd-all-channel") is None

    cdo = await _status(client, user_ns, "cd-bad", lambda c: True)
    assert _ready(cdo)["reason"] == "InvalidImexScope"
    assert "'perNode' is not one of perDomain, perClique" in _ready(cdo)["message"]
    assert not cdo.metadata.finalizers
    assert sharedimex.FIXED_SCOPE_ANNOTATION not in (cdo.metadata.annotations or {})
    await _event(client, user_ns, bad.metadata.uid, "InvalidImexScope")
    assert await _template(client, user_ns, "cd-bad-channel") is None


async def test_per_clique_needs_resident_agents(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()  # per-CD DaemonSets, default per domain
    cd = await _cd(client, "cd-pc", user_ns, scope="perClique")
    plain = await _cd(client, "cd-pd", user_ns)
    cdo = await _status(client, user_ns, "cd-pc", lambda c: True)
    assert _ready(cdo)["reason"] == "ImexScopeNeedsResidentAgents"
    assert "imex.agents=resident" in _ready(cdo)["message"]
    await _event(client, user_ns, cd.metadata.uid, "ImexScopeNeedsResidentAgents")
    await wait_for(
        client, ResourceClaimTemplate, "cd-pd-channel", lambda _t: True, namespace=user_ns
    )
    labels = {names.COMPUTE_DOMAIN_LABEL: plain.metadata.uid}
    assert [d async for d in client.list(DaemonSet, namespace=driver_ns, labels=labels)]
    labels = {names.COMPUTE_DOMAIN_LABEL: cd.metadata.uid}
    assert [d async for d in client.list(DaemonSet, namespace=driver_ns, labels=labels)] == []
    assert await _template(client, user_ns, "cd-pc-channel") is None
    got = await client.get(ComputeDomainResource, "cd-pd", namespace=user_ns)
    assert got.metadata.annotations[sharedimex.FIXED_SCOPE_ANNOTATION] == "perDomain"


async def test_status_comes_from_channel_annotations_and_the_shared_registry(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller(**RESIDENT)
    cd = await _cd(client, "cd-st", user_ns)
    uid = cd.metadata.uid
    n1, n2, n3, other = (f"{p}-{uid[:6]}" for p in ("sa", "sb", "sc", "so"))
    async with objects.nodes(client, n1, n2, n3, other):
        for node in (n1, n2, n3, other):
            await client.patch(
                Node, node, {"metadata": {"labels": {names.GPU_CLIQUE_LABEL: CLIQUE}}}
            )
        for i, node in enumerate((n1, n2, n3)):
            pod = await objects.workload_pod(client, user_ns, f"w-{i}", node=node)
            await objects.workload_claim(
                client, user_ns, f"c-{i}", domain_uid=uid, node=node, pod=pod
            )
        entries = [(other, "10.9.0.9", "Ready"), (n1, "10.9.0.1", "NotReady")]
        entries.append((n2, "10.9.0.2", "NotReady"))
        await _registry(client, driver_ns, {uid: 1}, entries)
        for node in (n1, n2, n3):
            await _serve(client, node, {uid: 1})
        # Wait for the whole expected listing: the registry's entries and each Node's
        # annotation reach the controller's caches by different watches, in any order.
        want = {
            n1: ("10.9.0.1", 1, "NotReady"),
            n2: ("10.9.0.2", 2, "NotReady"),
            n3: ("", -1, "NotReady"),
        }

        def listing(c: Any) -> dict[str, tuple[str, int, str]]:
            return {k: (v["ipAddress"], v["index"], v["status"]) for k, v in _nodes(c).items()}

        # n3's channel annotation comes by the Node watch and may follow its listing (which
        # comes from its claim): wait for the message that reflects it as well.
        unregistered = f"node {n3}: its shared IMEX (clique {CLIQUE}) has not registered yet"
        cdo = await _status(
            client,
            user_ns,
            "cd-st",
            lambda c: listing(c) == want and unregistered in _message(c),
        )
        assert listing(cdo) == want
        ready = _ready(cdo)
        assert ready["reason"] == "Forming"
        assert "no IMEX channel of this ComputeDomain" not in ready["message"]

        entries = [(other, "10.9.0.9", "Ready"), (n1, "10.9.0.1", "Ready")]
        entries += [(n2, "10.9.0.2", "Ready"), (n3, "10.9.0.3", "Ready")]
        for node, ip, _ in entries:  # the agents that wrote them, alive
            await objects.agent_pod(client, driver_ns, node=node, ip=ip, ready=True)
        await _registry(client, driver_ns, {uid: 1}, entries)
        cdo = await _status(client, user_ns, "cd-st", lambda c: c["status"]["status"] == "Ready")
        assert _nodes(cdo)[n3]["index"] == 3 and other not in _nodes(cdo)
        assert _ready(cdo)["message"] == f"all 3 nodes Ready; IMEX channel 1 on clique {CLIQUE}"

        # n2's shared IMEX crashes: its agent reports NotReady; the CD goes NotReady at once.
        entries[2] = (n2, "10.9.0.2", "NotReady")
        await _registry(client, driver_ns, {uid: 1}, entries)
        cdo = await _status(client, user_ns, "cd-st", lambda c: c["status"]["status"] == "NotReady")
        ready = _ready(cdo)
        assert ready["reason"] == "NodeNotReady"
        assert f"node {n2}: its shared IMEX (clique {CLIQUE}) is not Ready" in ready["message"]
        assert _nodes(cdo)[n2]["status"] == "NotReady" and _nodes(cdo)[n1]["status"] == "Ready"
        await _event(client, user_ns, uid, "NodeNotReady")


async def test_an_entry_counts_only_while_its_agent_pod_is_ready_with_its_ip(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    """Issue 26, defect 3: ``kill -9`` of a node's agent leaves its registry entry Ready (its
    restarted process has not registered again) while its shared IMEX is gone; the kubelet
    marks the pod NotReady. The CD turns NotReady naming the node's agent, with no registry
    write; the pod Ready again with the same IP gives Ready on the same indices. A pod of the
    node with another IP (a new pod not registered yet) does not count either."""
    await start_controller(**RESIDENT)
    cd = await _cd(client, "cd-ag", user_ns)
    uid = cd.metadata.uid
    n1, n2 = (f"{p}-{uid[:6]}" for p in ("aa", "ab"))
    async with objects.nodes(client, n1, n2):
        entries = [(n1, "10.9.1.1", "Ready"), (n2, "10.9.1.2", "Ready")]
        for i, (node, ip, _) in enumerate(entries):
            await client.patch(
                Node, node, {"metadata": {"labels": {names.GPU_CLIQUE_LABEL: CLIQUE}}}
            )
            pod = await objects.workload_pod(client, user_ns, f"w-{i}", node=node)
            await objects.workload_claim(
                client, user_ns, f"c-{i}", domain_uid=uid, node=node, pod=pod
            )
            await objects.agent_pod(client, driver_ns, node=node, ip=ip, ready=True)
            await _serve(client, node, {uid: 1})
        await _registry(client, driver_ns, {uid: 1}, entries)
        formed = await _status(client, user_ns, "cd-ag", lambda c: c["status"]["status"] == "Ready")
        indices = {k: v["index"] for k, v in _nodes(formed).items()}
        assert indices == {n1: 0, n2: 1}

        # kill -9: the container dies, the kubelet marks the pod NotReady and restarts it.
        await objects.agent_pod(client, driver_ns, node=n2, ip="10.9.1.2", ready=False, restarts=1)
        cdo = await _status(client, user_ns, "cd-ag", lambda c: c["status"]["status"] == "NotReady")
        ready = _ready(cdo)
        assert ready["reason"] == "NodeNotReady", ready
        assert (
            f"node {n2}: its IMEX agent is not Ready (restart 1; its shared IMEX went with it)"
            in ready["message"]
        ), ready
        assert _nodes(cdo)[n2]["status"] == "NotReady" and _nodes(cdo)[n1]["status"] == "Ready"

        # The restarted agent is Ready again in the same pod (same IP, same slot).
        await objects.agent_pod(client, driver_ns, node=n2, ip="10.9.1.2", ready=True, restarts=1)
        back = await _status(client, user_ns, "cd-ag", lambda c: c["status"]["status"] == "Ready")
        assert {k: v["index"] for k, v in _nodes(back).items()} == indices

        # The pod is deleted: gone; its replacement (another IP, not registered yet) does not
        # back the entry either.
        await client.delete(Pod, f"agent-{n2}", namespace=driver_ns, grace_period=0)
        gone = f"node {n2}: its IMEX agent pod is gone (its shared IMEX went with it)"
        cdo = await _status(client, user_ns, "cd-ag", lambda c: gone in _message(c))
        assert cdo["status"]["status"] == "NotReady"
        name = f"agent-{n2}-new"
        await objects.agent_pod(client, driver_ns, node=n2, ip="10.9.1.22", ready=True, name=name)
        moved = f"its IMEX agent pod {name} does not have the registry entry's IP 10.9.1.2"
        cdo = await _status(client, user_ns, "cd-ag", lambda c: moved in _message(c))
        assert cdo["status"]["status"] == "NotReady"


async def test_teardown_removes_the_cds_channels_and_keeps_the_others(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller(**RESIDENT)
    gone = await _cd(client, "cd-x", user_ns)
    kept = await _cd(client, "cd-y", user_ns)
    x, y = gone.metadata.uid, kept.metadata.uid
    n1, n2 = f"ta-{x[:6]}", f"tb-{x[:6]}"
    async with objects.nodes(client, n1, n2):
        await _registry(client, driver_ns, {x: 1, y: 2}, [(n1, "10.8.0.1", "Ready")])
        await _serve(client, n1, {x: 1, y: 2})
        await _serve(client, n2, {x: 1})
        # The controller has seen both (its status lists the nodes and the channel) before the
        # deletion: its teardown finds them through its caches.
        await _status(
            client,
            user_ns,
            "cd-x",
            lambda c: (
                set(_nodes(c)) == {n1, n2} and "IMEX channel 1 on clique" in _ready(c)["message"]
            ),
        )
        await client.delete(ComputeDomainResource, "cd-x", namespace=user_ns)

        async def cd_gone() -> None:
            while True:
                try:
                    await client.get(ComputeDomainResource, "cd-x", namespace=user_ns)
                except ApiError:
                    return
                await asyncio.sleep(0.2)

        await asyncio.wait_for(cd_gone(), 60)
        for node, want in ((n1, {y: 2}), (n2, {})):
            got = await client.get(Node, node)
            assert sharedimex.channels(got.metadata.annotations) == want
            labels = got.metadata.labels or {}
            assert labels[sharedimex.SHARED_IMEX_LABEL] == sharedimex.SHARED_IMEX_ON
        registry = await client.get(
            ComputeDomainCliqueResource, sharedimex.registry_name(CLIQUE), namespace=driver_ns
        )
        assert sharedimex.channels(registry.metadata.annotations) == {y: 2}
        assert [d["nodeName"] for d in registry["daemons"]] == [n1]
        assert [p async for p in client.list(Pod, namespace=driver_ns)] == []


async def test_channels_of_a_force_deleted_cd_are_removed_as_orphans(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    """Deleted and its finalizer removed by hand while no controller ran (a force delete during
    an upgrade or a leader change): no teardown ran, the channel annotations name a CD that no
    longer exists; the next controller finds them in its channel indexes and removes them.

    The controller is stopped for the force delete: with it running, removing the finalizer
    first (as this test once did) raced its re-adding of the finalizer (then the normal teardown
    runs, not the orphan path), and deleting first lets it run the normal teardown at once."""
    first = await start_controller(**RESIDENT)
    cd = await _cd(client, "cd-f", user_ns)
    uid = cd.metadata.uid
    node = f"fa-{uid[:6]}"
    async with objects.nodes(client, node):
        await _registry(client, driver_ns, {uid: 1}, [(node, "10.7.0.1", "Ready")])
        await _serve(client, node, {uid: 1})
        await _status(client, user_ns, "cd-f", lambda c: node in _nodes(c))
        await stop(start_controller.tasks[first])  # type: ignore[attr-defined]
        await client.delete(ComputeDomainResource, "cd-f", namespace=user_ns)
        await client.patch(
            ComputeDomainResource,
            "cd-f",
            {"metadata": {"finalizers": None}},
            namespace=user_ns,
            patch_type=PatchType.MERGE,
        )
        gone = [c async for c in client.list(ComputeDomainResource, namespace=user_ns)]
        assert [c.metadata.name for c in gone] == []
        got = await client.get(Node, node)
        assert sharedimex.channels(got.metadata.annotations) == {uid: 1}  # nothing ran yet
        await start_controller(**RESIDENT)
        await wait_for(
            client, Node, node, lambda n: not sharedimex.channels(n.metadata.annotations)
        )
        await wait_for(
            client,
            ComputeDomainCliqueResource,
            sharedimex.registry_name(CLIQUE),
            lambda r: not sharedimex.channels(r.metadata.annotations),
            namespace=driver_ns,
        )
