"""Bad input on simulated nodes is reported as a kubelet reports it, and nothing else breaks.

A pod that references a missing ConfigMap (as a volume, as an env source), a plugin socket that
never answers, and a malformed CDI spec file: each pod gets the kubelet's event and waiting
reason, and a healthy pod on the same node keeps running.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Pod, ServiceAccount

from compute_domains.sim import state
from tests.integration.helpers import wait_for

NODE = "gb200-r0-n01"


@pytest.fixture
async def ns(admin: AsyncClient) -> AsyncIterator[str]:
    name = f"bad-{uuid.uuid4().hex[:6]}"
    await admin.create(Namespace.from_dict({"metadata": {"name": name}}))
    await wait_for(admin, ServiceAccount, "default", lambda _: True, namespace=name)
    yield name
    await admin.delete(Namespace, name)


def _pod(name: str, **spec: object) -> Pod:
    container = {"name": "c", "image": "debian:12", "command": ["sh", "-c", "sleep 3600"]}
    container.update(spec.pop("container", {}))  # type: ignore[arg-type]
    return Pod.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "terminationGracePeriodSeconds": 1,
                "containers": [container],
                **spec,
            },
        }
    )


async def _event(admin: AsyncClient, ns: str, pod: str, reason: str, timeout: float = 30) -> Event:
    async def seen() -> Event:
        while True:
            async for ev in admin.list(Event, namespace=ns, fields={"involvedObject.name": pod}):
                if ev.reason == reason:
                    return ev
            await asyncio.sleep(0.5)

    return await asyncio.wait_for(seen(), timeout)


def _waiting(reason: str) -> object:
    def check(p: Pod) -> bool:
        cs = (p.status.containerStatuses or []) if p.status else []
        return bool(
            cs and cs[0].state and cs[0].state.waiting and cs[0].state.waiting.reason == reason
        )

    return check


def _ready(p: Pod) -> bool:
    return bool(
        p.status
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    )


async def test_missing_configmap_volume_and_env(admin: AsyncClient, ns: str) -> None:
    await admin.create(_pod("healthy"), namespace=ns)
    await admin.create(
        _pod(
            "novol",
            volumes=[{"name": "cfg", "configMap": {"name": "absent"}}],
            container={"volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}]},
        ),
        namespace=ns,
    )
    await admin.create(
        _pod(
            "noenv",
            container={
                "env": [
                    {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}
                ]
            },
        ),
        namespace=ns,
    )
    ev = await _event(admin, ns, "novol", "FailedMount")
    assert 'configmap "absent" not found' in str(ev.message)
    await wait_for(admin, Pod, "novol", _waiting("ContainerCreating"), namespace=ns)  # type: ignore[arg-type]
    pod = await wait_for(
        admin,
        Pod,
        "noenv",
        _waiting("CreateContainerConfigError"),  # type: ignore[arg-type]
        namespace=ns,
        timeout=30,
    )
    assert 'configmap "absent" not found' in str(
        pod.status.containerStatuses[0].state.waiting.message
    )  # type: ignore[index,union-attr]
    await wait_for(admin, Pod, "healthy", _ready, namespace=ns, timeout=60)

    # Once the ConfigMap exists both pods start, as after a kubelet retry.
    await admin.create(
        ConfigMap.from_dict({"metadata": {"name": "absent"}, "data": {"k": "v"}}), namespace=ns
    )
    await wait_for(admin, Pod, "novol", _ready, namespace=ns, timeout=60)
    await wait_for(admin, Pod, "noenv", _ready, namespace=ns, timeout=60)


async def test_dead_plugin_socket_and_malformed_cdi_spec(
    admin: AsyncClient, ns: str, nodes_sim: state.SimPaths
) -> None:
    root = nodes_sim.node_root(NODE)
    # A socket that accepts connections but never answers a gRPC call.
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead_path = root / "var/lib/kubelet/plugins_registry/dead.example.com-reg.sock"
    dead.bind(str(dead_path))
    dead.listen(1)
    (root / "var/run/cdi/garbage.json").write_text("{not json")
    try:
        # The kubelet's plugin reconcile found the dead socket and gave up on it (GetInfo timed
        # out): only then can the pod below show that a dead plugin blocks nothing.
        refused = f"plugin socket {dead_path} did not answer registration"

        async def logged() -> None:
            while refused not in nodes_sim.supervisor_log.read_text(errors="replace"):
                await asyncio.sleep(0.2)

        await asyncio.wait_for(logged(), 30)
        await admin.create(_pod("after"), namespace=ns)
        await wait_for(admin, Pod, "after", _ready, namespace=ns, timeout=60)
    finally:
        dead.close()
        dead_path.unlink(missing_ok=True)
        (root / "var/run/cdi/garbage.json").unlink(missing_ok=True)
