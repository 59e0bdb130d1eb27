"""The runtime's CDI step: device nodes given by path alone are completed from the node's host."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from compute_domains.containers import runtime
from compute_domains.sim.kubelet import cdi, errors

KIND = "test.compute-domains.dev/base"


def _spec(root: Path, nodes: list[dict[str, Any]]) -> str:
    spec = {
        "cdiVersion": "0.5.0",
        "kind": KIND,
        "devices": [{"name": "all", "containerEdits": {"deviceNodes": nodes}}],
    }
    folder = root / "var/run/cdi"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "base.json").write_text(json.dumps(spec))
    return f"{KIND}=all"


def _resolved(root: Path, nodes: list[dict[str, Any]]) -> list[tuple[str, str, int, int, int]]:
    _env, made, _mounts = cdi.resolve(root, [_spec(root, nodes)])
    return [(n.path, n.type, n.major, n.minor, n.mode) for n in made]


def test_a_path_only_node_takes_type_and_numbers_from_the_host_device(tmp_path: Path) -> None:
    """NVIDIA's management-mode spec lists ``/dev/null``-like nodes by path only: a real runtime
    stats the host device (here this machine's ``/dev/null``: the node root has none)."""
    null = os.stat("/dev/null").st_rdev
    assert _resolved(tmp_path, [{"path": "/dev/null"}]) == [
        ("/dev/null", "c", os.major(null), os.minor(null), 0o666)
    ]


def test_host_path_is_looked_up_in_the_node_root_first(tmp_path: Path) -> None:
    """Host path P is the node's ``<node root>/P`` when it exists there (the node's own devices),
    not this machine's: a FIFO at the node's ``/dev/null`` wins over the machine's char device,
    and its permission bits are the node's mode (CDI 1.1 takes a missing ``fileMode`` from the
    host node)."""
    (tmp_path / "dev").mkdir()
    os.mkfifo(tmp_path / "dev/null")
    (tmp_path / "dev/null").chmod(0o640)
    assert _resolved(tmp_path, [{"path": "/dev/nvnull", "hostPath": "/dev/null"}]) == [
        ("/dev/nvnull", "p", 0, 0, 0o640)
    ]


def test_given_numbers_and_mode_are_kept(tmp_path: Path) -> None:
    """A node with a type and a major needs no host device (channel nodes carry 238:N)."""
    node = {"path": "/dev/chan7", "type": "c", "major": 238, "minor": 7, "fileMode": 0o600}
    assert _resolved(tmp_path, [node]) == [("/dev/chan7", "c", 238, 7, 0o600)]


@pytest.mark.parametrize(
    ("node", "message"),
    [
        (
            {"path": "/dev/nvidia0", "hostPath": "/no/such/nvidia0"},
            # The library's lstat is ``unix.Lstat``: its error is a bare errno, no path prefix.
            'failed to stat CDI host device "/no/such/nvidia0": no such file or directory',
        ),
        (
            {"path": "/dev/plain"},
            'failed to stat CDI host device "/dev/plain": not a device node',
        ),
        (
            {"path": "/dev/x", "hostPath": "/dev/fifo", "type": "c"},
            'CDI device ("/dev/x", "/dev/fifo"), host type mismatch (c, p)',
        ),
    ],
)
def test_an_unusable_host_device_fails_the_container_as_a_runtime_does(
    tmp_path: Path, node: dict[str, Any], message: str
) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/plain").write_text("a file, not a device")
    os.mkfifo(tmp_path / "dev/fifo")
    with pytest.raises(errors.CreateError) as err:
        _resolved(tmp_path, [node])
    assert str(err.value) == f"CDI device injection failed: failed to inject devices: {message}"


def test_cdi_edits_apply_over_the_containers_own_env_and_mounts(tmp_path: Path) -> None:
    """As containerd applies CDI to its OCI spec: a CDI env entry replaces the pod's of the same
    name, a CDI mount replaces the pod's mount at the same path (its host path in the node
    root), and mounts end up parents first."""
    spec = {
        "cdiVersion": "0.3.0",
        "kind": KIND,
        "containerEdits": {
            "env": ["A=cdi"],
            "mounts": [{"hostPath": "/drv/x", "containerPath": "/data", "options": ["ro"]}],
        },
        "devices": [{"name": "d", "containerEdits": {"env": ["B=dev"]}}],
    }
    (tmp_path / "etc/cdi").mkdir(parents=True)
    (tmp_path / "etc/cdi/x.json").write_text(json.dumps(spec))
    pod_mounts = [
        runtime.Mount(source="/hosts", target="/etc/hosts"),
        runtime.Mount(source="/vol", target="/data"),
    ]
    env, nodes, mounts = cdi.resolve(
        tmp_path, [f"{KIND}=d"], env={"A": "pod", "C": "pod"}, mounts=pod_mounts
    )
    assert env == {"A": "cdi", "C": "pod", "B": "dev"}
    assert nodes == []
    assert [(m.source, m.target, m.readonly) for m in mounts] == [
        (str(tmp_path / "drv/x"), "/data", True),
        ("/hosts", "/etc/hosts", False),
    ]


def test_an_unknown_device_fails_the_container_naming_only_it(tmp_path: Path) -> None:
    known = _spec(tmp_path, [{"path": "/dev/null"}])
    with pytest.raises(errors.CreateError) as err:
        cdi.resolve(tmp_path, [known, f"{KIND}=gone"])
    assert str(err.value) == f"CDI device injection failed: unresolvable CDI devices {KIND}=gone"
