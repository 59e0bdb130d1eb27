"""Fixtures for controller integration tests: CRDs, namespaces, in-process controllers.

Each test gets its own driver namespace and user namespace, and starts controllers with
``start_controller`` (the real ``Controller.run()`` as an asyncio task, admin kubeconfig). At
teardown every controller is cancelled, and whatever a failed test left behind is stripped of
our finalizer and deleted, so it cannot leak into the next test (the controller watches CDs in
every namespace).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2 as httpx
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import Namespace, Node
from lightkube.resources.resource_v1 import ResourceClaimTemplate
from lightkube.types import PatchType

from compute_domains import controller
from compute_domains.api import names
from compute_domains.api.clique import ComputeDomainCliqueResource
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.infra import kube
from compute_domains.sim import state
from tests.integration.controller import objects

IMAGE = "ghcr.io/compute-domains/compute-domains:test"

StartController = Callable[..., Awaitable[controller.Controller]]


@pytest.fixture
async def crds(client: AsyncClient) -> None:
    await objects.install_crds(client)


@pytest.fixture
async def driver_ns(client: AsyncClient, crds: None) -> AsyncIterator[str]:
    name = f"cd-driver-{uuid.uuid4().hex[:6]}"
    await objects.namespace(client, name)
    yield name
    await _scrub(client, name)


@pytest.fixture
async def user_ns(client: AsyncClient, crds: None) -> AsyncIterator[str]:
    name = f"cd-user-{uuid.uuid4().hex[:6]}"
    await objects.namespace(client, name)
    yield name
    await _scrub(client, name)


def settings_for(
    sim: state.SimPaths, driver_ns: str, **overrides: Any
) -> controller.ControllerSettings:
    daemon = overrides.pop("daemon", None) or controller.DaemonSettings(image=IMAGE)
    return controller.ControllerSettings(
        namespace=driver_ns,
        kube=kube.KubeSettings(kubeconfig=sim.kubeconfig, field_manager="test-controller"),
        daemon=daemon,
        metrics_port=overrides.pop("metrics_port", 0),
        **overrides,
    )


@pytest.fixture
async def start_controller(
    sim: state.SimPaths, driver_ns: str
) -> AsyncIterator[Callable[..., Awaitable[controller.Controller]]]:
    """``await start_controller(**settings)``: a running controller (cancelled at teardown)."""
    tasks: list[asyncio.Task[None]] = []

    async def start(*, wait_leading: bool = True, **overrides: Any) -> controller.Controller:
        settings = overrides.pop("settings", None) or settings_for(sim, driver_ns, **overrides)
        instance = controller.Controller(settings)
        task = asyncio.create_task(instance.run(), name="controller-under-test")
        instance_task[instance] = task
        tasks.append(task)
        if wait_leading:
            leading = asyncio.create_task(instance.leading.wait())
            done, _ = await asyncio.wait({leading, task}, timeout=90, return_when="FIRST_COMPLETED")
            leading.cancel()
            if task in done:
                task.result()
                raise AssertionError("controller ended before leading")
            assert done, "controller did not start leading within 90 s"
        return instance

    instance_task: dict[controller.Controller, asyncio.Task[None]] = {}
    start.tasks = instance_task  # type: ignore[attr-defined]
    yield start
    for task in tasks:
        await stop(task)


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel a controller task and wait for it to finish.

    A controller that does not end within 30 s of its cancellation fails the test with every
    task's stack, instead of hanging it (``wait_for`` would wait for the cancelled task forever).
    """
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=30)
    if not done:
        stacks = io.StringIO()
        for other in asyncio.all_tasks():
            other.print_stack(file=stacks)
        raise AssertionError(
            f"controller did not stop within 30 s of its cancellation:\n{stacks.getvalue()}"
        )
    with contextlib.suppress(asyncio.CancelledError):
        task.result()


async def _strip_and_delete(client: AsyncClient, res: Any, obj: Any) -> None:
    meta = obj.metadata
    with contextlib.suppress(ApiError):
        if meta.finalizers:
            await client.patch(
                res,
                meta.name,
                {"metadata": {"finalizers": None}},
                namespace=meta.namespace,
                patch_type=PatchType.MERGE,
            )
        await client.delete(res, meta.name, namespace=meta.namespace)


async def _scrub(client: AsyncClient, ns: str) -> None:
    """Best-effort removal of a test's leftovers; a slow API server must not fail the test."""
    log = logging.getLogger(__name__)
    task = asyncio.create_task(_scrub_once(client, ns))
    # Not wait_for: after its timeout it waits for the cancelled work without a bound.
    done, _ = await asyncio.wait({task}, timeout=60)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=5)
        log.warning("could not scrub namespace %s within 60 s", ns)
        return
    try:
        task.result()
    except (ApiError, httpx.HTTPError) as err:
        log.warning("could not scrub namespace %s: %r", ns, err)


async def _scrub_once(client: AsyncClient, ns: str) -> None:
    uids: set[str] = set()
    for res in (ComputeDomainResource, DaemonSet, ResourceClaimTemplate):
        async for obj in client.list(res, namespace=ns):
            uids.add(obj.metadata.uid)
            await _strip_and_delete(client, res, obj)
    async for clique in client.list(ComputeDomainCliqueResource, namespace=ns):
        await _strip_and_delete(client, ComputeDomainCliqueResource, clique)
    async for node in client.list(Node, labels={names.COMPUTE_DOMAIN_LABEL: None}):
        # Test nodes are deleted by their owners; only strip labels naming test CDs here.
        value = (node.metadata.labels or {}).get(names.COMPUTE_DOMAIN_LABEL)
        if value in uids:
            with contextlib.suppress(ApiError):
                await client.patch(
                    Node,
                    node.metadata.name,
                    {"metadata": {"labels": {names.COMPUTE_DOMAIN_LABEL: None}}},
                )
    with contextlib.suppress(ApiError):
        await client.delete(Namespace, ns)
