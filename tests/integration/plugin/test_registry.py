"""Channel allocation in a clique's shared registry, against the real API server (issue 26).

Several plugins (one ``Registry`` each, its own client) allocate in one registry at once, as
the nodes of a clique do when per-clique CDs form: every CD gets one number, no two CDs share
one, and no writer's annotation is lost to another's write.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import GenericNamespacedResource
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from compute_domains.api import agentpods, names, sharedimex
from compute_domains.api.clique import (
    CliqueDaemon,
    ComputeDomainClique,
    ComputeDomainCliqueResource,
)
from compute_domains.api.computedomain import ComputeDomain, Readiness
from compute_domains.infra import errors, kube
from compute_domains.plugin import registry
from compute_domains.sim import state
from tests.integration.plugin.conftest import NODES, Namespaces

pytestmark = pytest.mark.integration

NODE_A = NODES[0]


def _cd(name: str) -> ComputeDomain:
    """A CD as the plugin sees it (only its identity matters to the registry)."""
    return ComputeDomain.from_dict(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.COMPUTE_DOMAIN_KIND,
            "metadata": {"name": name, "namespace": "user", "uid": str(uuid.uuid4())},
            "spec": {"channel": {"resourceClaimTemplate": {"name": name}}},
        }
    )


def _clique() -> str:
    return f"{uuid.uuid4()}.{uuid.uuid4().int % 100}"


@pytest.fixture
async def clients(plugin_sim: state.SimPaths) -> AsyncIterator[Callable[[], AsyncClient]]:
    """``new()``: one more client, as another node's plugin has its own."""
    made: list[AsyncClient] = []

    def new() -> AsyncClient:
        c = kube.client(
            kube.KubeSettings(kubeconfig=plugin_sim.kubeconfig, field_manager="plugin-test")
        )
        made.append(c)
        return c

    yield new
    for c in made:
        await c.close()


async def _annotations(admin: AsyncClient, ns: str, clique: str) -> dict[str, str]:
    obj = await admin.get(
        ComputeDomainCliqueResource, sharedimex.registry_name(clique), namespace=ns
    )
    return dict((obj.metadata.annotations if obj.metadata else None) or {})


async def test_two_cds_get_distinct_channels_and_each_keeps_its_own(
    admin: AsyncClient, spaces: Namespaces
) -> None:
    reg = registry.Registry(admin, node=NODE_A, driver_namespace=spaces.driver)
    clique, x, y = _clique(), _cd("x"), _cd("y")
    assert await reg.allocate(clique, x) == 1
    assert await reg.allocate(clique, y) == 2
    assert await reg.allocate(clique, x) == 1, "a CD's number is kept"
    assert await reg.allocate(_clique(), y) == 1, "numbers are per clique"
    obj = await admin.get(
        ComputeDomainCliqueResource, sharedimex.registry_name(clique), namespace=spaces.driver
    )
    assert obj.metadata is not None
    assert obj.metadata.labels == {
        sharedimex.SCOPE_LABEL: "perClique",
        names.CLIQUE_ID_LABEL: clique,
    }, "no CD label: no CD's teardown touches the registry"
    assert sharedimex.channels(obj.metadata.annotations) == {x.uid: 1, y.uid: 2}


async def test_one_cd_racing_from_several_plugins_gets_one_number(
    admin: AsyncClient, spaces: Namespaces, clients: Callable[[], AsyncClient]
) -> None:
    clique, cds = _clique(), [_cd(f"cd{i}") for i in range(3)]
    plugins = [
        registry.Registry(clients(), node=n, driver_namespace=spaces.driver)
        for n in (f"node-{i}" for i in range(6))
    ]
    # Every plugin allocates every CD at once; the registry does not exist yet (all race to
    # create it).
    got = await asyncio.gather(*(p.allocate(clique, cd) for cd in cds for p in plugins))
    by_cd: dict[str, set[int]] = {}
    for (cd, _p), channel in zip(((cd, p) for cd in cds for p in plugins), got, strict=True):
        by_cd.setdefault(cd.uid, set()).add(channel)
    assert all(len(v) == 1 for v in by_cd.values()), f"one number per CD: {by_cd}"
    numbers = {next(iter(v)) for v in by_cd.values()}
    assert numbers == {1, 2, 3}, f"distinct numbers, lowest first: {by_cd}"
    stored = sharedimex.channels(await _annotations(admin, spaces.driver, clique))
    assert stored == {uid: next(iter(v)) for uid, v in by_cd.items()}


class _Interleaved(registry.Registry):
    """A registry client whose next read, once ``armed``, is followed at once by another
    writer's write (the interleaving two nodes' plugins produce by chance)."""

    def __init__(self, client: AsyncClient, other: Callable[[], Any], **kw: Any) -> None:
        super().__init__(client, **kw)
        self._other = other
        self.armed = False
        self.reads = 0

    async def _read(self, name: str) -> GenericNamespacedResource | None:
        found = await super()._read(name)
        self.reads += 1
        if self.armed:
            self.armed = False
            await self._other()
        return found


async def test_a_concurrent_channel_writer_keeps_its_number_and_ours_moves_on(
    admin: AsyncClient, spaces: Namespaces, clients: Callable[[], AsyncClient]
) -> None:
    clique, x, y = _clique(), _cd("x"), _cd("y")
    other = registry.Registry(clients(), node="node-other", driver_namespace=spaces.driver)
    ours = _Interleaved(
        clients(),
        lambda: other.allocate(clique, y),
        node=NODE_A,
        driver_namespace=spaces.driver,
    )
    await ours.allocate(clique, _cd("first"))  # the registry exists: writes are patches
    ours.reads, ours.armed = 0, True
    assert await ours.allocate(clique, x) == 3, "planned 2, conflicted, re-planned"
    assert ours.reads == 2
    stored = sharedimex.channels(await _annotations(admin, spaces.driver, clique))
    assert stored[y.uid] == 2 and stored[x.uid] == 3 and len(stored) == 3


async def test_a_concurrent_writer_of_other_fields_keeps_its_write_and_ours_lands(
    admin: AsyncClient, spaces: Namespaces, clients: Callable[[], AsyncClient]
) -> None:
    clique, x = _clique(), _cd("x")
    name = sharedimex.registry_name(clique)
    writer = clients()
    entry = CliqueDaemon(node_name=NODE_A, ip_address="127.9.0.1", clique_id=clique)

    async def agent_registers() -> None:
        current = ComputeDomainClique.from_resource(
            await writer.get(ComputeDomainCliqueResource, name, namespace=spaces.driver)
        )
        registered = ComputeDomainClique(metadata=current.metadata, daemons=(entry,))
        await writer.replace(registered.to_resource())

    ours = _Interleaved(clients(), agent_registers, node=NODE_A, driver_namespace=spaces.driver)
    await ours.allocate(clique, _cd("first"))
    ours.reads, ours.armed = 0, True
    assert await ours.allocate(clique, x) == 2
    assert ours.reads == 2, "the agent's write made ours conflict once"
    found = ComputeDomainClique.from_resource(
        await admin.get(ComputeDomainCliqueResource, name, namespace=spaces.driver)
    )
    assert found.daemons == (entry,)
    assert sharedimex.channels(found.metadata.annotations)[x.uid] == 2


async def test_every_channel_taken_is_a_retryable_error(
    admin: AsyncClient, spaces: Namespaces
) -> None:
    clique = _clique()
    reg = registry.Registry(admin, node=NODE_A, driver_namespace=spaces.driver)
    await reg.allocate(clique, _cd("first"))
    full = {
        sharedimex.channel_key(f"cd-{n}"): str(n)
        for n in range(sharedimex.FIRST_CHANNEL, sharedimex.CHANNEL_LIMIT)
    }
    await admin.patch(
        ComputeDomainCliqueResource,
        sharedimex.registry_name(clique),
        {"metadata": {"annotations": full}},
        namespace=spaces.driver,
        patch_type=PatchType.MERGE,
    )
    with pytest.raises(errors.TemporaryError, match="no IMEX channel free for ComputeDomain"):
        await reg.allocate(clique, _cd("late"))


async def _agent_pod(admin: AsyncClient, ns: str, node: str, ip: str, *, ready: bool) -> None:
    """The resident agent's pod of ``node`` (a node without a kubelet: the test plays it),
    Running with ``ip`` and the given readiness (created when missing)."""
    name = f"agent-{node}"
    try:
        await admin.get(Pod, name, namespace=ns)
    except ApiError:
        body = {
            "metadata": {"name": name, "namespace": ns, "labels": dict(agentpods.LABELS)},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "imex-agent", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
        await admin.create(Pod.from_dict(body))
    flag = "True" if ready else "False"
    status = {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": flag}],
    }
    await admin.patch(Pod.Status, name, {"status": status}, namespace=ns)


async def _set_entry(admin: AsyncClient, ns: str, clique: str, entry: CliqueDaemon) -> None:
    name = sharedimex.registry_name(clique)
    current = ComputeDomainClique.from_resource(
        await admin.get(ComputeDomainCliqueResource, name, namespace=ns)
    )
    await admin.replace(
        ComputeDomainClique(metadata=current.metadata, daemons=(entry,)).to_resource()
    )


async def test_readiness_waits_for_this_nodes_entry_in_the_registry(
    admin: AsyncClient, spaces: Namespaces
) -> None:
    clique, cd = _clique(), _cd("x")
    node = f"ghost-{uuid.uuid4().hex[:8]}"  # no kubelet: the test plays the agent's pod
    reg = registry.Registry(admin, node=node, driver_namespace=spaces.driver)
    with pytest.raises(errors.TemporaryError, match="the node's shared IMEX is not Ready yet"):
        await reg.wait_ready(cd, clique, 0.5)  # no registry yet
    await reg.allocate(clique, cd)
    await _agent_pod(admin, spaces.driver, node, "127.9.0.1", ready=True)
    entry = CliqueDaemon(
        node_name=node, ip_address="127.9.0.1", clique_id=clique, status=Readiness.NOT_READY
    )
    await _set_entry(admin, spaces.driver, clique, entry)
    with pytest.raises(errors.TemporaryError, match="the node's shared IMEX is not Ready yet"):
        await reg.wait_ready(cd, clique, 0.5)  # registered, not Ready
    waiting = asyncio.create_task(reg.wait_ready(cd, clique, 30))
    await _set_entry(
        admin, spaces.driver, clique, dataclasses.replace(entry, status=Readiness.READY)
    )
    await asyncio.wait_for(waiting, 30)


async def test_readiness_needs_the_nodes_agent_pod_ready_with_the_entrys_ip(
    admin: AsyncClient, spaces: Namespaces
) -> None:
    """Issue 26, defect 3: the agent killed with ``kill -9`` left its entry Ready (its shared
    IMEX gone with it) and its pod NotReady: a prepare must not pass on that entry, and says
    why; the pod Ready again with the entry's IP lets the waiting prepare through."""
    clique, cd = _clique(), _cd("y")
    node = f"ghost-{uuid.uuid4().hex[:8]}"
    reg = registry.Registry(admin, node=node, driver_namespace=spaces.driver)
    await reg.allocate(clique, cd)
    entry = CliqueDaemon(
        node_name=node, ip_address="127.9.0.2", clique_id=clique, status=Readiness.READY
    )
    await _set_entry(admin, spaces.driver, clique, entry)
    with pytest.raises(errors.TemporaryError, match="its IMEX agent pod is gone"):
        await reg.wait_ready(cd, clique, 0.5)  # no agent pod at all
    await _agent_pod(admin, spaces.driver, node, "127.9.0.2", ready=False)  # killed
    with pytest.raises(errors.TemporaryError, match="its IMEX agent is not Ready"):
        await reg.wait_ready(cd, clique, 0.5)
    waiting = asyncio.create_task(reg.wait_ready(cd, clique, 30))
    await _agent_pod(admin, spaces.driver, node, "127.9.0.2", ready=True)  # restarted, Ready
    await asyncio.wait_for(waiting, 30)


async def test_racing_plugins_allocating_from_their_followed_registries_get_one_number(
    admin: AsyncClient, spaces: Namespaces, clients: Callable[[], AsyncClient]
) -> None:
    """The per-clique prepare plans its first allocation from the registry its followers read
    (``following``), which may be stale by the time it writes: the race of the test above,
    from followed state, still gives every CD one number and no two CDs one number."""
    clique, cds = _clique(), [_cd(f"cd{i}") for i in range(3)]
    plugins = [
        registry.Registry(clients(), node=n, driver_namespace=spaces.driver)
        for n in (f"node-{i}" for i in range(6))
    ]

    async def allocate(p: registry.Registry, cd: ComputeDomain) -> int:
        async with p.following(clique):
            return await p.allocate(clique, cd)

    got = await asyncio.gather(*(allocate(p, cd) for cd in cds for p in plugins))
    by_cd: dict[str, set[int]] = {}
    for (cd, _p), channel in zip(((cd, p) for cd in cds for p in plugins), got, strict=True):
        by_cd.setdefault(cd.uid, set()).add(channel)
    assert all(len(v) == 1 for v in by_cd.values()), f"one number per CD: {by_cd}"
    assert {next(iter(v)) for v in by_cd.values()} == {1, 2, 3}, f"distinct: {by_cd}"
    stored = sharedimex.channels(await _annotations(admin, spaces.driver, clique))
    assert stored == {uid: next(iter(v)) for uid, v in by_cd.items()}


async def _served_node(
    admin: AsyncClient, spaces: Namespaces, cd: ComputeDomain, clique: str, ip: str, *, ready: bool
) -> tuple[str, int]:
    """A node of ``clique`` whose registry entry (at ``ip``) is Ready and whose agent pod is
    Ready or not, with ``cd``'s channel allocated: (node name, channel)."""
    node = f"ghost-{uuid.uuid4().hex[:8]}"
    setup = registry.Registry(admin, node=node, driver_namespace=spaces.driver)
    channel = await setup.allocate(clique, cd)
    entry = CliqueDaemon(node_name=node, ip_address=ip, clique_id=clique, status=Readiness.READY)
    await _set_entry(admin, spaces.driver, clique, entry)
    await _agent_pod(admin, spaces.driver, node, ip, ready=ready)
    return node, channel


class _Counting:
    """A client that counts the API calls made through it (by method name)."""

    def __init__(self, client: AsyncClient) -> None:
        self._wrapped = client
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        if name in ("get", "list", "watch", "patch", "create", "replace"):
            self.calls[name] += 1
        return getattr(self._wrapped, name)


async def test_a_prepare_following_the_clique_reads_the_registry_once(
    admin: AsyncClient, spaces: Namespaces
) -> None:
    """Inside ``following`` (a per-clique prepare from its scope check to its end), the
    allocation and the readiness wait read the registry and the agent pods from the one pair of
    followers: one read of the registry and two watches in all, no read or watch of their own
    (before: a read for the allocation, then a read and two watches for the wait); and the
    readiness rule still holds: an entry Ready without its Ready agent pod is waited on."""
    clique, cd = _clique(), _cd("z")
    node, channel = await _served_node(admin, spaces, cd, clique, "127.9.0.3", ready=False)
    counting = _Counting(admin)
    reg = registry.Registry(cast(AsyncClient, counting), node=node, driver_namespace=spaces.driver)
    async with reg.following(clique):
        assert await reg.allocate(clique, cd) == channel, "the CD's number, kept"
        with pytest.raises(errors.TemporaryError, match="its IMEX agent is not Ready"):
            await reg.wait_ready(cd, clique, 0.5)
        waiting = asyncio.create_task(reg.wait_ready(cd, clique, 30))
        await _agent_pod(admin, spaces.driver, node, "127.9.0.3", ready=True)
        await asyncio.wait_for(waiting, 30)
    calls = dict(counting.calls)
    # The timed-out wait asked the CD (``blocked``) why: a list of CDs, not the registry.
    calls.pop("list", None)
    assert calls == {"get": 1, "watch": 2}, calls


class _Failing(_Counting):
    """``_Counting`` whose first ``failures`` watches fail at once (an API failure that ends a
    follower); ``followed`` is set once a read and two watches after those were opened."""

    def __init__(self, client: AsyncClient, failures: int = 0) -> None:
        super().__init__(client)
        self.failures = failures
        self.watching = 0
        self.followed = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        found = super().__getattr__(name)
        if name != "watch":
            return found
        if self.failures > 0:
            self.failures -= 1

            async def broken(*_a: Any, **_k: Any) -> AsyncIterator[Any]:
                raise RuntimeError("watch failed (test)")
                yield  # an async generator, as lightkube's watch is

            return broken
        self.watching += 1
        if self.watching >= 2:
            self.followed.set()
        return found


async def test_a_held_follower_serves_the_first_prepare_with_no_read_or_watch(
    admin: AsyncClient, spaces: Namespaces
) -> None:
    """An eager per-clique node's plugin holds its clique's follower (``hold``) from its start:
    the first prepare's allocation and readiness wait then read nothing and open no watch of
    their own (without it, the prepare's own ``following`` reads the registry once and opens
    two watches: the test above)."""
    clique, cd = _clique(), _cd("h")
    node, channel = await _served_node(admin, spaces, cd, clique, "127.9.0.4", ready=True)
    counting = _Failing(admin)
    reg = registry.Registry(cast(AsyncClient, counting), node=node, driver_namespace=spaces.driver)
    held = asyncio.create_task(reg.hold(clique))
    try:
        await asyncio.wait_for(counting.followed.wait(), 30)
        before = dict(counting.calls)
        async with reg.following(clique):
            assert await reg.allocate(clique, cd) == channel
            await reg.wait_ready(cd, clique, 30)
        assert dict(counting.calls) == before, "the prepare read or watched on its own"
    finally:
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)


async def test_a_held_follower_that_fails_is_replaced(
    admin: AsyncClient, spaces: Namespaces
) -> None:
    """A held follower whose watch fails (the API's error) is followed again after the retry
    delay, and prepares are then served from the new one: a failed follower never stays
    the node's answer for good."""
    clique, cd = _clique(), _cd("f")
    node, _ = await _served_node(admin, spaces, cd, clique, "127.9.0.5", ready=True)
    counting = _Failing(admin, failures=1)
    reg = registry.Registry(cast(AsyncClient, counting), node=node, driver_namespace=spaces.driver)
    held = asyncio.create_task(reg.hold(clique, retry_s=0.05))
    try:
        # The first follower fails; its replacement reads the registry again and watches.
        await asyncio.wait_for(counting.followed.wait(), 30)
        assert counting.calls["get"] >= 2, counting.calls
        before = dict(counting.calls)
        async with reg.following(clique):
            await reg.wait_ready(cd, clique, 30)
        assert dict(counting.calls) == before
        assert not held.done()
    finally:
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)
