"""A simulated container sees what a real node's container would: its image, its volumes, the
node's kernel tables, and NVIDIA software only where a volume or CDI spec puts it.

The project's image, like NVIDIA's, holds no NVIDIA software: a container of it that has no CDI
base spec cannot reach ``nvidia-imex`` in any way (not on PATH, not at the driver's paths, not
through the node's driver root). The node's ``/proc/devices`` and ``/proc/driver/nvidia`` are the
simulated GB200 host's, not this machine's; a hostPath volume of the driver root shows the
driver's programs and device nodes with a GB200 host's numbers. An image of the image map is its
folder: its files over the host's, its own top-level folders, a private writable layer.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Namespace, Pod, ServiceAccount

from compute_domains.sim import driverroot, lifecycle, state, toolchain, topology
from tests.conftest import keep_sims
from tests.integration.helpers import wait_for

NODE = "gb200-r0-n00"
PROJECT_IMAGE = "ghcr.io/compute-domains/compute-domains:test"
MAPPED = "registry.example/tools/hello"


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An image's filesystem as a folder: a program, a config and a folder of its own."""
    root = tmp_path_factory.mktemp("image")
    hello = root / "usr/bin/hello-image"
    hello.parent.mkdir(parents=True)
    hello.write_text("#!/bin/sh\necho hello from the image\n")
    hello.chmod(0o755)
    (root / "etc").mkdir()
    (root / "etc/hello.conf").write_text("greeting=hi\n")
    (root / "templates").mkdir()
    (root / "templates/t.yaml").write_text("kind: Template\n")
    return root


@pytest.fixture(scope="module")
def nodes_sim(
    toolset: toolchain.Toolset, sim_home: Path, image_dir: Path
) -> Iterator[state.SimPaths]:
    """This module's own sim: one node and an image map."""
    paths = state.SimPaths(sim_home, "hostview")
    started = lifecycle.start(
        paths,
        toolset.bin_dir,
        die_with_parent=True,
        shape=topology.Shape(racks=1, nodes_per_rack=1, gpus_per_node=4),
        image_map=((MAPPED, image_dir),),
    )
    yield paths
    lifecycle.stop(paths, process=started.process, remove=not keep_sims())


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


def _pod(name: str, ns: str, image: str, driver_volume: bool = False, script: str = _PROBE) -> Pod:
    container: dict[str, object] = {"name": "c", "image": image, "command": ["sh", "-c", script]}
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


async def test_a_mapped_image_is_its_folder_with_a_private_writable_layer(
    admin: AsyncClient, ns: str, image_dir: Path
) -> None:
    script = (
        "hello-image; cat /etc/hello.conf /templates/t.yaml; "
        "echo mine > /usr/bin/written && cat /usr/bin/written; echo done"
    )
    lines = await _output(admin, _pod("mapped", ns, f"{MAPPED}:1.0", script=script))
    assert lines == ["hello from the image", "greeting=hi", "kind: Template", "mine", "done"]
    # The container's writes stay in its own layer: neither the image nor the host changed.
    assert not (image_dir / "usr/bin/written").exists()
    assert not Path("/usr/bin/written").exists()
