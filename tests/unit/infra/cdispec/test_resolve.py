"""Resolving CDI names and injecting them: spec-level edits, priorities, duplicates, formats."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from compute_domains.infra import cdispec

NV = "nvidia.com/gpu"
OURS = "k8s.compute-domain.nvidia.com/claim"


def _nvidia_style(driver_root: str) -> dict[str, Any]:
    """A spec shaped like nvidia-ctk's management spec: spec-level mounts, env and hooks;
    devices listing nodes by ``path`` and ``hostPath`` only."""
    return {
        "cdiVersion": "0.5.0",
        "kind": NV,
        "devices": [
            {
                "name": "all",
                "containerEdits": {
                    "deviceNodes": [{"path": "/dev/nvctl", "hostPath": "/dev/fifo"}]
                },
            },
            {
                "name": "0",
                "containerEdits": {"deviceNodes": [{"path": "/dev/nv0", "hostPath": "/dev/fifo"}]},
            },
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void", "SHARED=spec"],
            "mounts": [
                {
                    "hostPath": f"{driver_root}/usr/bin/nvidia-imex",
                    "containerPath": "/usr/bin/nvidia-imex",
                    "options": ["ro", "nosuid", "nodev", "bind"],
                }
            ],
            "hooks": [
                {
                    "hookName": "createContainer",
                    "path": "/usr/bin/nvidia-cdi-hook",
                    "args": ["nvidia-cdi-hook", "update-ldcache"],
                }
            ],
        },
    }


def _ours() -> dict[str, Any]:
    return {
        "cdiVersion": "0.3.0",
        "kind": OURS,
        "devices": [
            {
                "name": "uid-channel-0",
                "containerEdits": {
                    "env": ["SHARED=device"],
                    "deviceNodes": [
                        {
                            "path": "/dev/nvidia-caps-imex-channels/channel0",
                            "type": "c",
                            "major": 238,
                            "minor": 0,
                            "fileMode": 438,
                        }
                    ],
                },
            }
        ],
    }


@pytest.fixture
def host(tmp_path: Path) -> cdispec.RootedHost:
    root = tmp_path / "host"
    (root / "dev").mkdir(parents=True)
    os.mkfifo(root / "dev/fifo")
    (root / "dev/fifo").chmod(0o600)
    return cdispec.RootedHost(root=root)


def _write(folder: Path, name: str, doc: dict[str, Any], fmt: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc) if fmt == "json" else "---\n" + yaml.safe_dump(doc)
    (folder / f"{name}.{fmt}").write_text(text)


def _inject(folder: Path, ids: list[str], host: cdispec.Host) -> cdispec.OciConfig:
    specs, failed = cdispec.load_spec_dirs([folder])
    assert failed == {}
    return cdispec.inject(
        ids, specs, cdispec.OciConfig(env=("SHARED=pod", "HOME=/root")), host=host
    )


@pytest.mark.parametrize("nvidia_format", ["yaml", "json"])
@pytest.mark.parametrize("our_format", ["json", "yaml"])
def test_nvidia_and_our_specs_apply_identically_from_yaml_or_json(
    tmp_path: Path, host: cdispec.RootedHost, nvidia_format: str, our_format: str
) -> None:
    folder = tmp_path / "cdi"
    _write(folder, "nvidia", _nvidia_style("/driver"), nvidia_format)
    _write(folder, "ours", _ours(), our_format)
    out = _inject(folder, [f"{NV}=all", f"{OURS}=uid-channel-0", f"{NV}=0"], host)
    # Spec-level env first (once), then each device's; the pod's own entries replaced in place.
    assert out.env == ("SHARED=device", "HOME=/root", "NVIDIA_VISIBLE_DEVICES=void")
    assert [(n.path, n.type, n.major, n.minor, n.file_mode) for n in out.device_nodes] == [
        ("/dev/nvctl", "p", 0, 0, 0o600),
        ("/dev/nvidia-caps-imex-channels/channel0", "c", 238, 0, 0o666),
        ("/dev/nv0", "p", 0, 0, 0o600),
    ]
    assert [(m.host_path, m.container_path) for m in out.mounts] == [
        (str(host.root / "driver/usr/bin/nvidia-imex"), "/usr/bin/nvidia-imex")
    ]
    assert [h.args for h in out.hooks] == [("nvidia-cdi-hook", "update-ldcache")]


def test_spec_level_edits_come_with_the_first_device_of_their_spec_only(tmp_path: Path) -> None:
    folder = tmp_path / "cdi"
    _write(folder, "nvidia", _nvidia_style("/d"), "yaml")
    _write(folder, "ours", _ours(), "json")
    edits = cdispec.container_edits_for(
        [f"{OURS}=uid-channel-0", f"{NV}=0", f"{NV}=all"], cdispec.load_spec_dirs([folder])[0]
    )
    assert edits.env == ("SHARED=device", "NVIDIA_VISIBLE_DEVICES=void", "SHARED=spec")
    assert [n.path for n in edits.device_nodes] == [
        "/dev/nvidia-caps-imex-channels/channel0",
        "/dev/nv0",
        "/dev/nvctl",
    ]
    assert len(edits.hooks) == 1 and len(edits.mounts) == 1


def test_a_device_requested_twice_is_injected_once(
    tmp_path: Path, host: cdispec.RootedHost
) -> None:
    """The kubelet may list a device twice (a claim re-prepared after a restart); containerd
    injects it once, so a device-level hook does not run twice."""
    doc = _nvidia_style("/d")
    hook = {"hookName": "createContainer", "path": "/bin/device-hook"}
    doc["devices"][1]["containerEdits"]["hooks"] = [hook]
    folder = tmp_path / "cdi"
    _write(folder, "nvidia", doc, "yaml")
    once = _inject(folder, [f"{NV}=0"], host)
    twice = _inject(folder, [f"{NV}=0", f"{NV}=0"], host)
    assert twice == once
    assert [h.path for h in twice.hooks] == ["/usr/bin/nvidia-cdi-hook", "/bin/device-hook"]
    assert len(twice.device_nodes) == 1


def test_an_unresolvable_device_fails_naming_only_it(
    tmp_path: Path, host: cdispec.RootedHost
) -> None:
    folder = tmp_path / "cdi"
    _write(folder, "ours", _ours(), "json")
    with pytest.raises(cdispec.UnresolvableDevicesError) as caught:
        _inject(folder, [f"{OURS}=uid-channel-0", f"{OURS}=gone", "x.io/y=z"], host)
    assert str(caught.value) == f"unresolvable CDI devices {OURS}=gone, x.io/y=z"
    assert caught.value.names == (f"{OURS}=gone", "x.io/y=z")


def _env_spec(value: str, priority: int) -> cdispec.Spec:
    doc = {
        "cdiVersion": "0.3.0",
        "kind": "v.io/c",
        "devices": [{"name": "d", "containerEdits": {"env": [f"X={value}"]}}],
    }
    return cdispec.parse_spec(doc, priority=priority)


@pytest.mark.parametrize(
    ("specs", "want"),
    [
        ([("etc", 0), ("run", 1)], "X=run"),
        ([("run", 1), ("etc", 0)], "X=run"),
        ([("a", 0), ("b", 0)], None),
        ([("a", 0), ("b", 0), ("run", 1)], None),
        ([("a", 0), ("run", 1), ("b", 1)], None),
    ],
    ids=[
        "higher-folder-wins",
        "whatever-the-listing-order",
        "same-folder-conflict-resolves-to-nothing",
        "a-lower-conflict-is-not-cleared-by-a-higher-folder",
        "a-conflict-at-the-top",
    ],
)
def test_priorities_and_conflicts(specs: list[tuple[str, int]], want: str | None) -> None:
    parsed = [_env_spec(value, priority) for value, priority in specs]
    if want is None:
        with pytest.raises(cdispec.UnresolvableDevicesError):
            cdispec.container_edits_for(["v.io/c=d"], parsed)
    else:
        assert cdispec.container_edits_for(["v.io/c=d"], parsed).env == (want,)


def test_nothing_is_applied_when_a_host_node_is_missing(tmp_path: Path) -> None:
    folder = tmp_path / "cdi"
    _write(folder, "nvidia", _nvidia_style("/d"), "yaml")
    with pytest.raises(cdispec.InjectionError, match='"/dev/fifo": no such file'):
        _inject(folder, [f"{NV}=0"], cdispec.RootedHost(root=tmp_path / "empty"))


@pytest.mark.parametrize("render", [cdispec.to_json, cdispec.to_yaml], ids=["json", "yaml"])
def test_rendered_specs_load_back_to_the_same_model(tmp_path: Path, render: Any) -> None:
    spec = cdispec.parse_spec(_nvidia_style("/driver"))
    suffix = ".json" if render is cdispec.to_json else ".yaml"
    path = tmp_path / f"spec{suffix}"
    path.write_text(render(spec))
    assert cdispec.load_spec_file(path) == spec
    assert cdispec.parse_spec(cdispec.spec_document(spec)) == spec


def test_a_json_named_file_holding_yaml_loads_as_the_library_reads_it(tmp_path: Path) -> None:
    """The takeover renames NVIDIA's YAML claim spec to our ``.json`` name before rewriting it;
    meanwhile a runtime still resolves its devices."""
    path = tmp_path / "renamed.json"
    path.write_text(cdispec.to_yaml(cdispec.parse_spec(_ours())))
    assert cdispec.load_spec_file(path) == cdispec.parse_spec(_ours())
