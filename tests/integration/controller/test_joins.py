"""Daemons joining one clique at once: the controller assigns every index, nothing conflicts.

The daemons' clique membership (``daemon.membership``, the code the daemon runs) runs here, one
instance per hand-made daemon pod, against the sim's API server, with the controller in this
process. Covered: twelve daemons whose pods appear together get twelve distinct indices
0..11 and report Ready, without one refused clique write (no 409, no failed patch test) by any
daemon or the controller; a replacement pod on a node keeps that node's index; a thirteenth
node finds the clique full, which its daemon reports (Event on its pod) and the controller too
(Event on the CD), and it joins on the freed index once a daemon leaves. A clique deleted while
its CD lives is made again by the controller (the entry on its index); once the CD is being
deleted, its teardown deletes the clique and nobody makes it again (the daemons never create a
clique; the controller creates none for a CD being deleted or gone).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event, Pod

from compute_domains import controller
from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainClique, ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource, Readiness
from compute_domains.daemon import events, membership, metrics
from compute_domains.daemon.config import Identity
from compute_domains.infra import backoff
from tests.integration.controller import objects
from tests.integration.controller.conftest import IMAGE, StartController
from tests.integration.helpers import wait_for, wait_gone

pytestmark = pytest.mark.integration

CLIQUE = "c0ffee00-0000-0000-0000-0000000000aa.3"
N = 12


class _Daemon:
    """One daemon's membership (and its pod Events) running in this process."""

    def __init__(self, client: AsyncClient, ident: Identity) -> None:
        self.ident = ident
        self.meter = metrics.DaemonMetrics()
        self.recorder = events.PodEvents(client, ident)
        self.member = membership.Membership(
            client,
            ident,
            max_nodes=N,
            retry=backoff.Backoff(initial=0.05, maximum=0.5),
            recorder=self.recorder,
            on_peers=lambda _mapping: None,
            meter=self.meter,
        )
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self.tasks = [
            asyncio.create_task(self.member.run()),
            asyncio.create_task(self.recorder.run()),
        ]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def refused(self) -> float:
        """Clique writes of this daemon the API server refused, every verb."""
        return float(sum(self.meter.clique_conflicts.values()))


@contextlib.asynccontextmanager
async def _daemons(
    client: AsyncClient, ns: str, cd: Any, nodes: list[str], first_ip: int, suffix: str = ""
) -> AsyncIterator[list[_Daemon]]:
    """Daemon pods on ``nodes`` created together, and their memberships started together."""
    uid = cd.metadata.uid
    made = await asyncio.gather(
        *(
            objects.daemon_pod(
                client,
                ns,
                domain_uid=uid,
                node=node,
                ip=f"10.8.0.{first_ip + i}",
                clique_id=CLIQUE,
                ready=False,
                name=f"daemon-{node}{suffix}",
            )
            for i, node in enumerate(nodes)
        )
    )
    daemons = [
        _Daemon(
            client,
            Identity(
                node_name=node,
                pod_name=pod.metadata.name,
                pod_namespace=ns,
                pod_uid=pod.metadata.uid,
                pod_ip=pod.status.podIP,
                clique_id=CLIQUE,
                domain_uid=uid,
                domain_name=cd.metadata.name,
                domain_namespace=cd.metadata.namespace,
            ),
        )
        for node, pod in zip(nodes, made, strict=True)
    ]
    for d in daemons:
        d.start()
    try:
        yield daemons
    finally:
        for d in daemons:
            await d.stop()


def _controller_refusals(instance: controller.Controller) -> dict[str, float]:
    """The controller's clique requests the API server refused, by ``verb code``."""
    out: dict[str, float] = {}
    for metric in instance.metrics.registry.collect():
        for sample in metric.samples:
            labels = sample.labels
            if (
                sample.name == "compute_domains_controller_api_requests_total"
                and labels.get("resource") == "computedomaincliques"
                and labels.get("code") not in ("200", "201")
                and sample.value
            ):
                out[f"{labels['verb']} {labels['code']}"] = sample.value
    return out


async def test_concurrent_joins_get_distinct_indices_without_a_single_conflict(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    instance = await start_controller(
        daemon=controller.DaemonSettings(image=IMAGE, max_nodes_per_imex_domain=N)
    )
    cd = await objects.create_cd(client, "cd-j", user_ns, "cd-j-channel")
    uid = cd.metadata.uid
    nodes = [f"j{i:02d}-{uid[:6]}" for i in range(N + 1)]
    name = names.clique_object_name(uid, CLIQUE)
    async with objects.nodes(client, *nodes), _daemons(client, driver_ns, cd, nodes[:N], 1) as ds:
        # Every daemon is listed by the controller, on its own index.
        def all_listed(raw: Any) -> bool:
            clique = ComputeDomainClique.from_resource(raw)
            return {d.node_name for d in clique.daemons} == set(nodes[:N])

        raw = await wait_for(
            client, ComputeDomainCliqueResource, name, all_listed, namespace=driver_ns
        )
        clique = ComputeDomainClique.from_resource(raw)
        assert sorted(d.index for d in clique.daemons) == list(range(N))
        for d in ds:
            entry = clique.daemon(d.ident.node_name)
            assert entry is not None and entry.ip_address == d.ident.pod_ip
        await asyncio.gather(
            *(wait_until(lambda d=d: d.member.index is not None) for d in ds)  # type: ignore[misc]
        )
        assert {d.member.index for d in ds} == set(range(N))

        # All report Ready at once: every entry turns Ready.
        for d in ds:
            d.member.set_status(Readiness.READY)

        def all_ready(raw: Any) -> bool:
            daemons = ComputeDomainClique.from_resource(raw).daemons
            return len(daemons) == N and all(e.status is Readiness.READY for e in daemons)

        raw = await wait_for(
            client, ComputeDomainCliqueResource, name, all_ready, namespace=driver_ns
        )
        indices = {e.node_name: e.index for e in ComputeDomainClique.from_resource(raw).daemons}
        assert [d.refused() for d in ds] == [0.0] * N
        assert _controller_refusals(instance) == {}

        # Node 0's daemon pod is being deleted and a replacement comes up on the node before
        # the old one is gone: the replacement takes over the node's entry and index (starting
        # NotReady: the Ready was its predecessor's); the predecessor's removal then finds the
        # entry is not its own any more and leaves it.
        old = ds[0]
        await client.delete(Pod, old.ident.pod_name, namespace=driver_ns)
        async with _daemons(client, driver_ns, cd, [nodes[0]], 100, "-b") as (new,):

            def replaced(raw: Any) -> bool:
                entry = ComputeDomainClique.from_resource(raw).daemon(nodes[0])
                return entry is not None and entry.ip_address == new.ident.pod_ip

            raw = await wait_for(
                client, ComputeDomainCliqueResource, name, replaced, namespace=driver_ns
            )
            entry = ComputeDomainClique.from_resource(raw).daemon(nodes[0])
            assert entry is not None and entry.index == indices[nodes[0]]
            assert entry.status is Readiness.NOT_READY
            await wait_until(lambda: new.member.index == indices[nodes[0]])
            await old.stop()
            raw = await client.get(ComputeDomainCliqueResource, name, namespace=driver_ns)
            kept = ComputeDomainClique.from_resource(raw).daemon(nodes[0])
            assert kept is not None and kept.ip_address == new.ident.pod_ip

            # A thirteenth node: the clique is full; its daemon and the controller say so.
            async with _daemons(client, driver_ns, cd, [nodes[N]], 200) as (late,):
                reason = events.CLIQUE_FULL
                await wait_until_async(
                    lambda: _has_event(client, driver_ns, late.ident.pod_name, reason)
                )
                await wait_until_async(lambda: _has_event(client, user_ns, "cd-j", reason))
                assert late.member.index is None

                # Node 5's daemon is deleted and leaves the clique: the late node takes the
                # freed index.
                leaving = ds[5]
                await client.delete(Pod, leaving.ident.pod_name, namespace=driver_ns)
                await leaving.stop()
                await wait_until(lambda: late.member.index == indices[nodes[5]])
            assert [d.refused() for d in (*ds, new)] == [0.0] * (N + 1)
            assert _controller_refusals(instance) == {}


async def _has_event(client: AsyncClient, ns: str, obj: str, reason: str) -> bool:
    found = [
        e
        async for e in client.list(Event, namespace=ns, fields={"involvedObject.name": obj})
        if e.reason == reason
    ]
    return bool(found)


async def wait_until(ok: Any, timeout: float = 60) -> None:
    """Until ``ok()`` holds (in-process state, which changes by watch events: re-checked every
    50 ms)."""
    async with asyncio.timeout(timeout):
        while not ok():
            await asyncio.sleep(0.05)


async def wait_until_async(ok: Any, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not await ok():
            await asyncio.sleep(0.5)


async def test_a_deleted_clique_is_made_again_only_while_its_cd_lives(
    client: AsyncClient, driver_ns: str, user_ns: str, start_controller: StartController
) -> None:
    await start_controller()
    cd = await objects.create_cd(client, "cd-t", user_ns, "cd-t-channel")
    uid = cd.metadata.uid
    node = f"t0-{uid[:6]}"
    name = names.clique_object_name(uid, CLIQUE)
    async with objects.nodes(client, node), _daemons(client, driver_ns, cd, [node], 50) as (d,):
        first = await wait_for(
            client,
            ComputeDomainCliqueResource,
            name,
            lambda r: ComputeDomainClique.from_resource(r).daemon(node) is not None,
            namespace=driver_ns,
        )
        await wait_until(lambda: d.member.index is not None)
        index = d.member.index

        # The CD lives: a deleted clique is made again, the entry on its index.
        await client.delete(ComputeDomainCliqueResource, name, namespace=driver_ns)

        def remade(raw: Any) -> bool:
            entry = ComputeDomainClique.from_resource(raw).daemon(node)
            return raw.metadata.uid != first.metadata.uid and entry is not None

        again = await wait_for(
            client, ComputeDomainCliqueResource, name, remade, namespace=driver_ns
        )
        assert ComputeDomainClique.from_resource(again).daemon(node).index == index  # type: ignore[union-attr]

        # The CD is deleted: its teardown deletes the clique, which stays gone while the daemon
        # (its pod is owned elsewhere here, so it lives on) keeps following it.
        await client.delete(ComputeDomainResource, "cd-t", namespace=user_ns)
        await wait_gone(client, ComputeDomainResource, "cd-t", user_ns, timeout=90)
        await wait_gone(client, ComputeDomainCliqueResource, name, driver_ns, timeout=90)
        # A change of the daemon pod asks the controller to look at the CD again.
        await objects.set_pod_ready(
            client, driver_ns, d.ident.pod_name, ip=d.ident.pod_ip, ready=True
        )
        # An absence, watched for 3 s (the controller's pass takes milliseconds).
        loop = asyncio.get_running_loop()
        end = loop.time() + 3.0
        while loop.time() < end:
            found = [r async for r in client.list(ComputeDomainCliqueResource, namespace=driver_ns)]
            assert [r.metadata.name for r in found] == []
            await asyncio.sleep(0.25)
        assert d.refused() == 0.0
