"""The runtime's CDI step: CDI edits injected into a container's env, device nodes and mounts."""

from __future__ import annotations

from pathlib import Path

import pytest

from compute_domains.containers import cdi, runtime
from compute_domains.infra import cdispec

KIND = "test.compute-domains.dev/dev"


def _spec(*devices: cdispec.Device) -> cdispec.Spec:
    return cdispec.Spec(version="0.5.0", kind=KIND, devices=devices)


def test_edits_merge_over_the_containers_own_env_and_mounts(tmp_path: Path) -> None:
    edits = cdispec.ContainerEdits(
        env=("A=cdi", "B=new"),
        mounts=(cdispec.Mount(host_path="/lib/x", container_path="/x", options=("ro",)),),
    )
    got = cdi.inject(
        [f"{KIND}=d"],
        [_spec(cdispec.Device(name="d", edits=edits))],
        host=cdispec.RootedHost(root=tmp_path),
        env={"A": "pod", "C": "pod"},
        mounts=[
            runtime.Mount(source="/pod/x", target="/x"),
            runtime.Mount(source="/pod/y", target="/y", readonly=True),
        ],
    )
    assert got.env == {"A": "cdi", "C": "pod", "B": "new"}
    assert got.mounts == (
        runtime.Mount(source="/pod/y", target="/y", readonly=True),
        runtime.Mount(source=str(tmp_path / "lib/x"), target="/x", readonly=True),
    )


@pytest.mark.parametrize(("file_mode", "mode"), [(None, 0o666), (0o600, 0o600)])
def test_a_complete_node_keeps_its_numbers_and_gets_the_oci_default_mode(
    tmp_path: Path, file_mode: int | None, mode: int
) -> None:
    node = cdispec.DeviceNode(path="/dev/x", type="c", major=1, minor=3, file_mode=file_mode)
    edits = cdispec.ContainerEdits(device_nodes=(node,))
    got = cdi.inject(
        [f"{KIND}=d"],
        [_spec(cdispec.Device(name="d", edits=edits))],
        host=cdispec.RootedHost(root=tmp_path),
    )
    assert got.devices == (
        runtime.DeviceNode(path="/dev/x", major=1, minor=3, type="c", mode=mode),
    )
