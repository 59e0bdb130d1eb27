"""Bad input and faults: G1 (unknown field), G2 (stale claim cleanup across restarts), slice
drift, restarts with prepared claims, corrupt checkpoints, and the real CLI with real (mock) NVML.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

import httpx2 as httpx
import pytest
import yaml
from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim, ResourceSlice

from compute_domains.api import names
from compute_domains.infra import errors
from compute_domains.plugin import (
    app,
    cdi,
    checkpoint,
    checkpointfile,
    devices,
    nvidia_checkpoint,
    takeover,
)
from compute_domains.sim import driverroot, state, toolchain
from tests.integration.helpers import wait_for, wait_gone
from tests.integration.plugin import objects
from tests.integration.plugin.conftest import (
    NODES,
    Namespaces,
    StartPlugin,
    node_info,
    plugin_settings,
)
from tests.unit.plugin import nvidia_fixture

pytestmark = pytest.mark.integration

NODE_A, NODE_B = NODES
State = checkpoint.ClaimState


async def _until(check: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
    try:
        async with asyncio.timeout(timeout):
            while not check():
                await asyncio.sleep(0.2)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what or check}") from None


async def test_g1_g2_unknown_field_fails_at_once_and_the_stale_claim_is_cleaned_later(
    admin: AsyncClient,
    spaces: Namespaces,
    start_plugin: StartPlugin,
    plugin_sim: state.SimPaths,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="compute_domains.plugin")
    rc, pod = "batssuite-rc-bad-opaque-config", "batssuite-pod-boc"
    running = await start_plugin(NODE_A)
    await objects.bad_opaque_claim(admin, spaces.user, rc)
    await objects.pod(admin, spaces.user, pod, "sleep 3600", claim=rc, node=NODE_A)
    await wait_for(
        admin, Pod, pod, lambda p: bool(p.spec and p.spec.nodeName), namespace=spaces.user
    )
    loop = asyncio.get_running_loop()
    scheduled = loop.time()

    # G1: a FailedPrepareDynamicResources event naming the field, within 10 s.
    async def failed_event() -> str:
        while True:
            for e in await objects.events(admin, spaces.user, pod):
                if e.reason == "FailedPrepareDynamicResources" and "unknown field" in (
                    e.message or ""
                ):
                    return e.message or ""
            await asyncio.sleep(0.3)

    message = await asyncio.wait_for(failed_event(), 30)
    assert loop.time() - scheduled < 10, "the permanent error must not wait for retries"
    assert 'unknown field "unexpectedField"' in message
    assert any("Permanent error" in m and "unexpectedField" in m for m in caplog.messages)
    p = await admin.get(Pod, pod, namespace=spaces.user)
    waiting = p.status.containerStatuses[0].state.waiting  # type: ignore[index,union-attr]
    assert waiting is not None and waiting.reason == "ContainerCreating"

    claim_uid = (await admin.get(ResourceClaim, rc, namespace=spaces.user)).metadata.uid  # type: ignore[union-attr]
    entry = objects.read_checkpoint(plugin_sim, NODE_A).get(str(claim_uid))
    assert entry is not None and entry.state is State.PREPARE_ABORTED

    # G2 stage 2: a restart keeps the entry, because the claim still exists.
    await running.stop()
    caplog.clear()
    running = await start_plugin(NODE_A)
    assert f"partially prepared claim not stale: {spaces.user}/{rc}" in caplog.messages
    assert objects.read_checkpoint(plugin_sim, NODE_A).get(str(claim_uid)) is not None

    # G2 stage 3: with the plugin down, the pod is force-deleted and the claim removed; the
    # restarted plugin finds the stale entry and unprepares it by itself.
    await running.stop()
    await admin.delete(Pod, pod, namespace=spaces.user, grace_period=0)
    await admin.delete(ResourceClaim, rc, namespace=spaces.user)
    await wait_gone(admin, ResourceClaim, rc, spaces.user)
    caplog.clear()
    await start_plugin(NODE_A)
    assert any(f"unprepared stale claim: {spaces.user}/{rc}" in m for m in caplog.messages), (
        caplog.messages
    )
    entry = objects.read_checkpoint(plugin_sim, NODE_A).get(str(claim_uid))
    assert entry is not None and entry.state is State.UNPREPARED

    # G2 stage 4: the kubelet's own unprepare of that claim is an idempotent no-op.
    await _until(
        lambda: "Unprepare noop: claim not found in checkpoint data" in caplog.messages,
        timeout=60,
        what="the kubelet's unprepare",
    )


async def test_a_repeated_key_in_the_opaque_config_fails_the_claim(
    admin: AsyncClient,
    spaces: Namespaces,
    start_plugin: StartPlugin,
    plugin_sim: state.SimPaths,
    toolset: toolchain.Toolset,
) -> None:
    """The API server keeps opaque parameters byte for byte, so a claim sent as raw JSON keeps
    a repeated ``domainID``; the plugin refuses it as NVIDIA's strict decoder does, rather than
    using the last value (here the real CD's UID, which would prepare fine)."""
    await start_plugin(NODE_A)
    uid = await objects.compute_domain(admin, spaces.user, "dup")
    await objects.ready_clique(admin, spaces.driver, uid, node_info(NODE_A).clique_id, [NODE_A])
    params = {"apiVersion": names.API_VERSION, "kind": names.CHANNEL_CONFIG_KIND, "domainID": "X"}
    request = {"name": "chan", "exactly": {"deviceClassName": names.CHANNEL_DEVICE_CLASS}}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "dup", "namespace": spaces.user},
        "spec": {
            "devices": {
                "requests": [request],
                "config": [
                    {
                        "requests": ["chan"],
                        "opaque": {"driver": names.DRIVER_NAME, "parameters": params},
                    }
                ],
            }
        },
    }
    body = json.dumps(claim).replace('"domainID": "X"', f'"domainID": "other", "domainID": "{uid}"')
    kubectl = [str(toolset.path("kubectl")), "--kubeconfig", str(plugin_sim.kubeconfig)]
    path = f"/apis/resource.k8s.io/v1/namespaces/{spaces.user}/resourceclaims"
    done = await asyncio.to_thread(
        subprocess.run,
        [*kubectl, "create", "--raw", path, "-f", "-"],
        input=body,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert f'"domainID":"other","domainID":"{uid}"' in done.stdout, "stored as sent"
    await objects.pod(admin, spaces.user, "p", "sleep 3600", claim="dup", node=NODE_A)

    async def refused() -> str:
        while True:
            for e in await objects.events(admin, spaces.user, "p"):
                if e.reason == "FailedPrepareDynamicResources" and "duplicate field" in (
                    e.message or ""
                ):
                    return e.message or ""
            await asyncio.sleep(0.3)

    message = await asyncio.wait_for(refused(), 30)
    assert 'strict decoding error: duplicate field "domainID"' in message, message
    assert await objects.node_label(admin, NODE_A) is None


async def test_slice_is_republished_when_deleted_or_changed(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    await start_plugin(NODE_A)
    name = devices.slice_name(NODE_A)
    first = await wait_for(admin, ResourceSlice, name, lambda _s: True)
    await admin.delete(ResourceSlice, name)
    again = await wait_for(
        admin, ResourceSlice, name, lambda s: s.metadata.uid != first.metadata.uid, timeout=30
    )
    assert again.spec.nodeName == NODE_A
    body = again.to_dict()
    body["spec"]["devices"] = [{"name": "bogus", "attributes": {"type": {"string": "gpu"}}}]
    await admin.replace(ResourceSlice.from_dict(body))
    fixed = await wait_for(
        admin,
        ResourceSlice,
        name,
        lambda s: devices.same_devices(
            s.to_dict()["spec"]["devices"], devices.slice_devices(8, "")
        ),
        timeout=30,
    )
    assert fixed.spec.pool.generation > again.spec.pool.generation
    owner = fixed.metadata.ownerReferences[0]
    assert (owner.kind, owner.name, owner.controller) == ("Node", NODE_A, True)
    foreign = dict(body, metadata={"name": "00000-leftover"})
    foreign["spec"] = dict(
        body["spec"], pool={"name": NODE_A, "generation": 1, "resourceSliceCount": 1}
    )
    await admin.create(ResourceSlice.from_dict(foreign))
    await wait_gone(admin, ResourceSlice, "00000-leftover", None, timeout=30)


async def test_a_restart_keeps_prepared_claims_and_unprepares_them_later(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    running = await start_plugin(NODE_A)
    uid = await objects.compute_domain(admin, spaces.user, "restart")
    await objects.ready_clique(admin, spaces.driver, uid, node_info(NODE_A).clique_id, [NODE_A])
    await objects.workload_template(admin, spaces.user, "restart", uid)
    await objects.pod(admin, spaces.user, "w", "sleep 3600", template="restart", node=NODE_A)
    await objects.running(admin, spaces.user, "w")
    await running.stop()
    await start_plugin(NODE_A)
    assert await objects.node_label(admin, NODE_A) == uid, "a restart changes nothing"
    await admin.delete(Pod, "w", namespace=spaces.user, grace_period=0)
    await objects.wait_label(admin, NODE_A, None)


async def test_a_claim_for_a_domain_in_another_namespace_is_refused(
    admin: AsyncClient, spaces: Namespaces, start_plugin: StartPlugin
) -> None:
    await start_plugin(NODE_A)
    uid = await objects.compute_domain(admin, spaces.driver, "elsewhere")
    await objects.workload_template(admin, spaces.user, "elsewhere", uid)
    await objects.pod(admin, spaces.user, "p", "sleep 3600", template="elsewhere", node=NODE_A)

    async def refused() -> str:
        while True:
            for e in await objects.events(admin, spaces.user, "p"):
                if e.reason == "FailedPrepareDynamicResources" and "another namespace" in (
                    e.message or ""
                ):
                    return e.message or ""
            await asyncio.sleep(0.3)

    await asyncio.wait_for(refused(), 30)
    assert await objects.node_label(admin, NODE_A) is None


async def test_corrupt_checkpoint_stops_start_up_unless_quarantined(
    plugin_sim: state.SimPaths, spaces: Namespaces, cluster: None
) -> None:
    settings = plugin_settings(plugin_sim, NODE_B, spaces.driver)
    path = settings.paths.local(settings.paths.plugin_dir) / checkpointfile.FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = path.read_bytes() if path.exists() else None
    path.write_text("{half a checkp")
    try:
        with pytest.raises(errors.ConfigError, match="corrupt"):
            await asyncio.wait_for(app.Plugin(settings, _static(NODE_B)).run(), 60)
        quarantining = plugin_settings(
            plugin_sim, NODE_B, spaces.driver, quarantine_corrupt_checkpoint=True
        )
        plugin = app.Plugin(quarantining, _static(NODE_B))
        task = asyncio.create_task(plugin.run())
        await asyncio.wait_for(plugin.ready.wait(), 60)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert checkpointfile.load(path) is not None
        assert list(path.parent.glob("checkpoint.json.corrupt-*"))
    finally:
        for moved in path.parent.glob("checkpoint.json.corrupt-*"):
            moved.unlink()
        if saved is not None:
            path.write_bytes(saved)


def _static(node: str) -> object:
    from tests.integration.plugin.conftest import StaticDiscovery

    return StaticDiscovery(node_info(node))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_cli_with_the_nodes_mock_nvml_serves_a_pod(
    admin: AsyncClient, spaces: Namespaces, plugin_sim: state.SimPaths, cluster: None
) -> None:
    root = plugin_sim.node_root(NODE_B)
    port = _free_port()
    env = {
        **os.environ,
        # NVML from the node's driver root; the stand-in reads its config from beside itself.
        "LD_LIBRARY_PATH": str(root / driverroot.DRIVER_ROOT.lstrip("/") / driverroot.LIB_DIR),
        "NODE_NAME": NODE_B,
        "POD_NAMESPACE": spaces.driver,
    }
    argv = [sys.executable, "-m", "compute_domains", "plugin", "run"]
    argv += ["--host-root", str(root), "--kubeconfig", str(plugin_sim.kubeconfig)]
    argv += ["--nvidia-driver-root", driverroot.DRIVER_ROOT]
    argv += ["--proc-devices-path", str(root / "proc/devices")]
    argv += ["--boot-id-path", str(root / "proc/sys/kernel/random/boot_id")]
    argv += [
        "--fabric-imex-mgmt-path",
        str(root / "proc/driver/nvidia/capabilities/fabric-imex-mgmt"),
    ]
    argv += ["--metrics-port", str(port), "--metrics-address", "127.0.0.1", "--log-level", "info"]
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output: list[str] = []

    async def collect() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            output.append(line.decode(errors="replace"))

    reader = asyncio.create_task(collect())
    try:
        async with httpx.AsyncClient() as web:

            async def healthy() -> None:
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await web.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200:
                            return
                    if proc.returncode is not None:
                        raise AssertionError("".join(output))
                    await asyncio.sleep(0.3)

            await asyncio.wait_for(healthy(), 60)
            clique = node_info(NODE_B).clique_id
            assert any(f"clique {clique!r}" in line for line in output), "".join(output)
            uid = await objects.compute_domain(admin, spaces.user, "cli")
            await objects.ready_clique(admin, spaces.driver, uid, clique, [NODE_B])
            await objects.workload_template(admin, spaces.user, "cli", uid)
            script = "ls -l /dev/nvidia-caps-imex-channels; sleep 3600"
            await objects.pod(admin, spaces.user, "w", script, template="cli", node=NODE_B)
            await objects.running(admin, spaces.user, "w")
            await objects.log_containing(admin, spaces.user, "w", "channel0")
            text = (await web.get(f"http://127.0.0.1:{port}/metrics")).text
            prepared = 'operation="prepare"} 1.0'
            assert f'nvidia_dra_requests_total{{driver="{names.DRIVER_NAME}",{prepared}' in text
            await admin.delete(Pod, "w", namespace=spaces.user, grace_period=0)
            await objects.wait_label(admin, NODE_B, None)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 30)
        await reader
    assert code == 0, "".join(output)
    registry = root / "var/lib/kubelet/plugins_registry" / f"{names.DRIVER_NAME}-reg.sock"
    assert not registry.exists(), "sockets are removed on a clean stop"
    with contextlib.suppress(ApiError):
        await admin.get(ResourceSlice, devices.slice_name(NODE_B))  # left in place, as upstream


def _as_nvidia(ours: checkpoint.Checkpoint, extra: dict[str, Any]) -> str:
    """What NVIDIA's v25.12 plugin would hold for our completed claims (plus ``extra``)."""
    v2: dict[str, Any] = dict(extra)
    for uid, entry in ours.claims.items():
        if entry.state is not State.PREPARE_COMPLETED:
            continue
        groups = []
        for d in entry.devices:
            device = {
                "Requests": list(d.request_names),
                "PoolName": d.pool_name,
                "DeviceName": d.device_name,
                "CDIDeviceIDs": list(d.cdi_device_ids),
            }
            held = {"info": {"id": int(d.device_name.rsplit("-", 1)[1])}, "device": device}
            groups.append(
                {
                    "devices": [{k: held if k == d.kind else None for k in ("channel", "daemon")}],
                    "configState": {"Type": d.kind, "ComputeDomain": d.domain_uid},
                }
            )
        v2[uid] = {
            "checkpointState": "PrepareCompleted",
            "status": dict(entry.status),
            "preparedDevices": groups,
        }
    return nvidia_fixture.checkpoint_text(v2, sign=nvidia_checkpoint.checksum)


async def test_start_up_on_nvidias_checkpoint_adopts_the_running_workload(
    admin: AsyncClient,
    spaces: Namespaces,
    start_plugin: StartPlugin,
    plugin_sim: state.SimPaths,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 13 point 7: the node as NVIDIA's plugin leaves it, with a workload running on it."""
    caplog.set_level(logging.INFO, logger="compute_domains.plugin")
    running = await start_plugin(NODE_A)
    uid = await objects.compute_domain(admin, spaces.user, "takeover")
    await objects.ready_clique(admin, spaces.driver, uid, node_info(NODE_A).clique_id, [NODE_A])
    await objects.workload_template(admin, spaces.user, "takeover", uid)
    await objects.pod(admin, spaces.user, "w", "sleep 3600", template="takeover", node=NODE_A)
    pod_uid = (await objects.running(admin, spaces.user, "w")).metadata.uid  # type: ignore[union-attr]
    claim_uid = str((await objects.claim_of(admin, spaces.user, "w")).metadata.uid)  # type: ignore[union-attr]
    await running.stop()

    # Rewrite the node in NVIDIA's formats: checkpoint.json, claim spec and base spec in YAML,
    # plus a PrepareStarted entry whose ResourceClaim no longer exists.
    ours = objects.read_checkpoint(plugin_sim, NODE_A)
    path = (
        running.settings.paths.local(running.settings.paths.plugin_dir) / checkpointfile.FILE_NAME
    )
    stale_uid, stale_name = str(uuid.uuid4()), "gone-claim"
    started = {
        "checkpointState": "PrepareStarted",
        "status": dict(ours.claims[claim_uid].status),
        "name": stale_name,
        "namespace": spaces.user,
    }
    path.write_text(_as_nvidia(ours, {stale_uid: started}))
    spec = objects.cdi_spec_path(plugin_sim, NODE_A, claim_uid)
    cdi_root = spec.parent
    nvidia_spec = cdi_root / f"k8s.compute-domain.nvidia.com-claim_{claim_uid}.yaml"
    nvidia_spec.write_text(yaml.safe_dump(json.loads(spec.read_text())))
    spec.unlink()
    base = json.loads((cdi_root / cdi.BASE_SPEC_FILE).read_text())
    (cdi_root / takeover.NVIDIA_BASE_SPEC).write_text(yaml.safe_dump(base))

    caplog.clear()
    await start_plugin(NODE_A)
    took = [m for m in caplog.messages if m.startswith("Took over claim ")]
    assert any(claim_uid in m and "PrepareCompleted here" in m for m in took), took
    assert any(f"{spaces.user}/{stale_name} ({stale_uid})" in m for m in took), took
    assert any(m.startswith("Took over NVIDIA's") for m in caplog.messages)
    assert any(f"unprepared stale claim: {spaces.user}/{stale_name}" in m for m in caplog.messages)
    assert path.with_name("checkpoint.json.nvidia-v25.12").exists()
    now = objects.read_checkpoint(plugin_sim, NODE_A)
    assert now.claims[claim_uid].state is State.PREPARE_COMPLETED
    assert now.claims[claim_uid].devices == ours.claims[claim_uid].devices
    assert now.claims[stale_uid].state is State.UNPREPARED
    assert spec.exists() and not list(cdi_root.glob("*.yaml"))
    pod = await admin.get(Pod, "w", namespace=spaces.user)
    assert pod.metadata is not None and pod.metadata.uid == pod_uid
    assert pod.status is not None and pod.status.phase == "Running"
    assert await objects.node_label(admin, NODE_A) == uid, "the workload's domain keeps the node"

    # The workload goes: the kubelet's unprepare finds the adopted claim and undoes it.
    await admin.delete(Pod, "w", namespace=spaces.user, grace_period=0)
    await objects.wait_label(admin, NODE_A, None)

    def undone() -> bool:
        entry = objects.read_checkpoint(plugin_sim, NODE_A).claims[claim_uid]
        return entry.state is State.UNPREPARED

    # The tombstone is saved after the spec is removed, in the same transaction.
    await _until(undone, timeout=30, what="the adopted claim's tombstone")
    assert not spec.exists()
