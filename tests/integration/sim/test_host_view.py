"""A simulated container sees what a real node's container would: its image, its volumes, the
node's kernel tables, and NVIDIA software only where a volume or CDI spec puts it.

The project's image, like NVIDIA's, holds no NVIDIA software: a container of it that has no CDI
base spec cannot reach ``nvidia-imex`` in any way (not on PATH, not at the driver's paths, not
through the node's driver root). The node's ``/proc/devices`` and ``/proc/driver/nvidia`` are the
simulated GB200 host's, not this machine's; a hostPath volume of the driver root shows the
driver's programs and device nodes with a GB200 host's numbers.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount

from compute_domains.sim import driverroot
from tests.integration.helpers import wait_for

NODE = "gb200-r0-n00"
PROJECT_IMAGE = "ghcr.io/compute-domains/compute-domains:test"

_PROBE = r"""
if command -v nvidia-imex; then echo "imex: on PATH"; else echo "imex: not on PATH"; fi
for p in /usr/bin/nvidia-imex /usr/sbin/nvidia-imex /run/nvidia/driver/usr/bin/nvidia-imex; do
  test -e "$p" && echo "imex: at $p"
done
grep imex-channels /proc/devices | sed 's/^/devices: /'
cat /proc/driver/nvidia/capabilities/fabric-imex-mgmt | sed 's/^/cap: /'
test -e /driver/usr/bin/nvidia-imex && echo "volume: nvidia-imex"
test -c /driver/dev/nvidia0 && echo "volume: char $(stat -c '%t:%T' /driver/dev/nvidia0)"
echo done
"""


@pytest.fixture
async def ns(admin: AsyncClient) -> AsyncIterator[str]:
    name = f"hv-{uuid.uuid4().hex[:6]}"
    await admin.create(Namespace.from_dict({"metadata": {"name": name}}))
    await wait_for(admin, ServiceAccount, "default", lambda _: True, namespace=name)
    yield name
    await admin.delete(Namespace, name)


def _pod(name: str, ns: str, image: str, driver_volume: bool) -> Pod:
    container: dict[str, object] = {"name": "c", "image": image, "command": ["sh", "-c", _PROBE]}
    spec: dict[str, object] = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": NODE},
        "containers": [container],
    }
    if driver_volume:
        container["volumeMounts"] = [{"name": "driver", "mountPath": "/driver"}]
        spec["volumes"] = [
            {"name": "driver", "hostPath": {"path": driverroot.DRIVER_ROOT, "type": "Directory"}}
        ]
    return Pod.from_dict({"metadata": {"name": name, "namespace": ns}, "spec": spec})


async def _output(admin: AsyncClient, pod: Pod) -> list[str]:
    assert pod.metadata is not None and pod.metadata.name and pod.metadata.namespace
    name, ns = pod.metadata.name, pod.metadata.namespace
    await admin.create(pod)
    await wait_for(
        admin,
        Pod,
        name,
        lambda p: bool(p.status and p.status.phase in ("Succeeded", "Failed")),
        namespace=ns,
        timeout=60,
    )
    lines = [line.rstrip("\n") async for line in admin.log(name, namespace=ns)]
    assert lines and lines[-1] == "done", lines
    return lines


async def test_the_project_image_cannot_reach_nvidia_imex_without_the_cdi_base_spec(
    admin: AsyncClient, ns: str
) -> None:
    lines = await _output(admin, _pod("project", ns, PROJECT_IMAGE, driver_volume=False))
    assert "imex: not on PATH" in lines, lines
    assert not [line for line in lines if line.startswith(("imex: at", "volume:"))], lines


async def test_containers_see_the_nodes_kernel_tables_and_driver_volume(
    admin: AsyncClient, ns: str
) -> None:
    lines = await _output(admin, _pod("user", ns, "debian:12", driver_volume=True))
    assert "imex: not on PATH" in lines, lines
    assert f"devices: {driverroot.IMEX_CHANNEL_MAJOR} nvidia-caps-imex-channels" in lines
    assert "cap: DeviceFileMinor: 1" in lines
    assert "volume: nvidia-imex" in lines
    major = format(driverroot.NVIDIA_MAJOR, "x")
    assert f"volume: char {major}:0" in lines
