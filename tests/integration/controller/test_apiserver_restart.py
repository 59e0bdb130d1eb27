"""The API server restarts while the controller reconciles (issue "bad input and faults").

A private control plane (so the session's shared one is never taken down) runs the real
controller. Several CDs are created in a burst and the kube-apiserver is stopped at once, kept
down a few seconds and started again: requests in flight fail, every watch breaks. The same
happens right after the CDs are deleted, in the middle of their teardown. The controller must
keep running, bring every CD to its full set of objects, then remove all of them, and never
create a second copy of anything.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.resource_v1 import ResourceClaimTemplate

from compute_domains import controller
from compute_domains.api import names
from compute_domains.api.computedomain import ComputeDomainResource
from compute_domains.infra import kube
from compute_domains.sim import controlplane, toolchain
from tests.integration.controller import objects
from tests.integration.controller.conftest import IMAGE

CDS = 6
DOWN_S = 3.0


@pytest.fixture
async def private_cp(
    toolset: toolchain.Toolset, sim_home: Path
) -> AsyncIterator[controlplane.ControlPlane]:
    cp = controlplane.ControlPlane(
        controlplane.ControlPlaneSettings(
            state_dir=sim_home / "apiserver-restart", bin_dir=toolset.bin_dir
        )
    )
    task = asyncio.create_task(cp.run())
    ready = asyncio.create_task(cp.ready.wait())
    done, _ = await asyncio.wait({task, ready}, timeout=180, return_when="FIRST_COMPLETED")
    if task in done:
        task.result()
    assert ready in done, "private control plane did not turn healthy within 180 s"
    yield cp
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 60)


async def _eventually(
    check: Callable[[], Awaitable[bool]], what: str, timeout: float = 120
) -> None:
    """Poll ``check`` until true; API errors and broken connections count as "not yet"."""

    async def loop() -> None:
        while True:
            with contextlib.suppress(ApiError, httpx.HTTPError, OSError):
                if await check():
                    return
            await asyncio.sleep(0.5)

    try:
        await asyncio.wait_for(loop(), timeout)
    except TimeoutError:
        raise AssertionError(f"not within {timeout:.0f} s: {what}") from None


def _reason(cd: Any) -> str | None:
    """The Ready condition's reason of a CD ("NoWorkload" for a fresh one)."""
    conds = (cd.get("status") or {}).get("conditions") or []
    return next((c["reason"] for c in conds if c["type"] == "Ready"), None)


async def _names(client: AsyncClient, res: Any, ns: str) -> list[str]:
    return sorted([o.metadata.name async for o in client.list(res, namespace=ns)])


async def test_apiserver_restart_mid_reconcile_and_mid_teardown(
    private_cp: controlplane.ControlPlane,
) -> None:
    assert private_cp.endpoints is not None
    kc = Path(private_cp.endpoints.admin_kubeconfig)
    client = kube.client(kube.KubeSettings(kubeconfig=kc, field_manager="tests"))
    await objects.install_crds(client)
    await objects.namespace(client, "drv")
    await objects.namespace(client, "user")
    settings = controller.ControllerSettings(
        namespace="drv",
        kube=kube.KubeSettings(kubeconfig=kc, field_manager="test-controller"),
        daemon=controller.DaemonSettings(image=IMAGE),
        metrics_port=0,
    )
    ctl = controller.Controller(settings)
    ctl_task = asyncio.create_task(ctl.run())
    try:
        await asyncio.wait_for(ctl.leading.wait(), 90)
        uids = {}
        for i in range(CDS):
            cd = await objects.create_cd(client, f"cd-{i}", "user", f"ch-{i}")
            uids[f"cd-{i}"] = cd.metadata.uid
        # Down while the burst is being reconciled (requests in flight, watches open).
        await private_cp.restart("kube-apiserver", down_s=DOWN_S)
        assert not ctl_task.done(), "controller ended when the API server went away"

        want_ds = sorted(f"computedomain-daemon-{u}" for u in uids.values())
        want_wl = sorted(f"ch-{i}" for i in range(CDS))

        async def formed() -> bool:
            cds = [c async for c in client.list(ComputeDomainResource, namespace="user")]
            return (
                await _names(client, DaemonSet, "drv") == want_ds
                and await _names(client, ResourceClaimTemplate, "drv") == want_ds
                and await _names(client, ResourceClaimTemplate, "user") == want_wl
                and all(names.FINALIZER in (c.metadata.finalizers or []) for c in cds)
                and all(_reason(c) == "NoWorkload" for c in cds)
            )

        await _eventually(formed, f"{CDS} CDs with finalizer, DaemonSet, both templates, status")

        for i in range(CDS):
            await client.delete(ComputeDomainResource, f"cd-{i}", namespace="user")
        # Down again in the middle of the teardown.
        await private_cp.restart("kube-apiserver", down_s=DOWN_S)
        assert not ctl_task.done(), "controller ended when the API server went away"

        async def gone() -> bool:
            return not (
                await _names(client, ComputeDomainResource, "user")
                or await _names(client, DaemonSet, "drv")
                or await _names(client, ResourceClaimTemplate, "drv")
                or await _names(client, ResourceClaimTemplate, "user")
            )

        await _eventually(gone, "every CD, DaemonSet and template removed")

        # Still serving after both restarts: a new CD forms.
        await objects.create_cd(client, "cd-after", "user", "ch-after")

        async def after() -> bool:
            names_ = await _names(client, ResourceClaimTemplate, "user")
            return names_ == ["ch-after"] and len(await _names(client, DaemonSet, "drv")) == 1

        await _eventually(after, "a CD created after the restarts gets its objects")
    finally:
        ctl_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(ctl_task, 30)
        await client.close()
