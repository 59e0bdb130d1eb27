import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from compute_domains.infra import cdispec

KIND = "example.com/gpu"


def _doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "cdiVersion": "0.3.0",
        "kind": KIND,
        "containerEdits": {"env": ["SPEC=1"]},
        "devices": [
            {"name": "a", "containerEdits": {"env": ["DEV=a"]}},
            {
                "name": "b",
                "containerEdits": {
                    "env": ["DEV=b"],
                    "deviceNodes": [{"path": "/dev/x", "type": "c", "major": 5, "minor": 1}],
                    "mounts": [{"hostPath": "/h", "containerPath": "/c", "options": ["ro"]}],
                },
            },
        ],
    }
    doc.update(over)
    return doc


def test_parse_builds_the_model_and_serialises_back() -> None:
    spec = cdispec.parse_spec(_doc())
    assert spec.kind == KIND
    assert [d.name for d in spec.devices] == ["a", "b"]
    b = spec.devices[1].edits
    assert b.device_nodes == (cdispec.DeviceNode(path="/dev/x", type="c", major=5, minor=1),)
    assert b.mounts == (cdispec.Mount(host_path="/h", container_path="/c", options=("ro",)),)
    assert cdispec.spec_document(spec) == _doc()
    assert spec.qualified_name("a") == "example.com/gpu=a"


def test_leading_v_in_the_version_is_accepted() -> None:
    assert cdispec.parse_spec(_doc(cdiVersion="v0.3.0")).version == "0.3.0"


def _with_device(**edits: Any) -> dict[str, Any]:
    return _doc(devices=[{"name": "d", "containerEdits": edits}])


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_doc(cdiVersion="9.9.9"), "invalid version"),
        (_doc(kind="no-slash"), "invalid CDI kind"),
        (_doc(kind="ex/1bad"), "invalid CDI kind"),
        (_doc(devices=[]), "no devices"),
        (_doc(extra=1), "unknown fields"),
        (_doc(devices=[{"name": "d", "containerEdits": {}}]), "no container edits"),
        (_doc(devices=[{"name": "-d", "containerEdits": {"env": ["A=1"]}}]), "device name"),
        (_with_device(env=["=1"]), "invalid env"),
        (_with_device(env=["NOVALUE"]), "invalid env"),
        (_with_device(deviceNodes=[{"path": "/dev/x", "type": "z"}]), "invalid type"),
        (_with_device(deviceNodes=[{"path": "/dev/x", "permissions": "rx"}]), "permissions"),
        (_with_device(deviceNodes=[{"path": "/dev/x", "major": "5"}]), "non-integer"),
        (_with_device(deviceNodes=[{"path": "/dev/x", "bogus": 1}]), "unknown fields"),
        (_with_device(mounts=[{"hostPath": "/h"}]), "missing"),
        (_with_device(hooks=[{"hookName": "later", "path": "/bin/true"}]), "hook name"),
        (_with_device(hooks=[{"hookName": "prestart", "path": "rel"}]), "invalid hook"),
        (
            _doc(devices=[{"name": "a", "containerEdits": {"env": ["A=1"]}}] * 2),
            "duplicate device",
        ),
        (_doc(devices=[{"name": "1a", "containerEdits": {"env": ["A=1"]}}]), "at least v0.5.0"),
        (_with_device(deviceNodes=[{"path": "/dev/x", "hostPath": "/dev/y"}]), "at least v0.5.0"),
        (_with_device(mounts=[{"hostPath": "/h", "containerPath": "/c", "type": "b"}]), "v0.4.0"),
        (_doc(annotations={"a": "b"}), "at least v0.6.0"),
        (_with_device(env=["A=1"], netDevices=[]), "at least v1.1.0"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_invalid_specs_are_rejected(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(cdispec.CdiSpecError, match=message):
        cdispec.parse_spec(doc)


@pytest.mark.parametrize(
    ("doc", "version"),
    [
        (_doc(), "0.3.0"),
        (_with_device(mounts=[{"hostPath": "/h", "containerPath": "/c", "type": "bind"}]), "0.4.0"),
        (_doc(devices=[{"name": "1a", "containerEdits": {"env": ["A=1"]}}]), "0.5.0"),
        (_doc(kind="example.com/gpu.v2"), "0.6.0"),
        (_with_device(additionalGids=[5]), "0.7.0"),
        (_with_device(env=["A=1"], intelRdt={"closID": "x"}), "0.7.0"),
    ],
    ids=["plain", "mount-type", "digit-name", "dotted-class", "gids", "intel-rdt"],
)
def test_minimum_version(doc: dict[str, Any], version: str) -> None:
    doc = {**doc, "cdiVersion": "1.1.0"}
    assert cdispec.minimum_version(cdispec.parse_spec(doc), raw=doc) == version


def test_edits_merge_spec_level_once_then_device_edits_in_request_order() -> None:
    spec = cdispec.parse_spec(_doc())
    other = cdispec.parse_spec(
        _doc(kind="other.io/x", containerEdits={"env": ["OTHER=1"]}, devices=_doc()["devices"][:1])
    )
    edits = cdispec.container_edits_for(
        ["example.com/gpu=b", "other.io/x=a", "example.com/gpu=a"], [spec, other]
    )
    assert edits.env == ("SPEC=1", "DEV=b", "OTHER=1", "DEV=a", "DEV=a")
    assert [n.path for n in edits.device_nodes] == ["/dev/x"]
    assert edits.env_map()["DEV"] == "a"


def test_unresolvable_names_fail_the_whole_request() -> None:
    spec = cdispec.parse_spec(_doc())
    with pytest.raises(cdispec.UnresolvableDevicesError) as caught:
        cdispec.container_edits_for(["example.com/gpu=a", "example.com/gpu=zz", "x.io/y=1"], [spec])
    assert caught.value.names == ("example.com/gpu=zz", "x.io/y=1")
    assert "unresolvable CDI devices" in str(caught.value)


def test_same_priority_duplicates_conflict_and_higher_priority_wins() -> None:
    low = cdispec.parse_spec(_doc(), priority=0)
    high = cdispec.parse_spec(_doc(containerEdits={"env": ["SPEC=high"]}), priority=1)
    assert cdispec.container_edits_for([f"{KIND}=a"], [low, high]).env[0] == "SPEC=high"
    assert cdispec.container_edits_for([f"{KIND}=a"], [high, low]).env[0] == "SPEC=high"
    with pytest.raises(cdispec.UnresolvableDevicesError):
        cdispec.container_edits_for([f"{KIND}=a"], [low, low])


def test_apply_edits_replaces_by_name_and_path_and_sorts_mounts() -> None:
    base = cdispec.OciConfig(
        env=("PATH=/bin", "DEV=old"),
        device_nodes=(cdispec.DeviceNode(path="/dev/x", host_path="/dev/old"),),
        mounts=(cdispec.Mount(host_path="/a/b", container_path="/a/b"),),
    )
    edits = cdispec.ContainerEdits(
        env=("DEV=new", "NEW=1"),
        device_nodes=(
            cdispec.DeviceNode(path="/dev/x", type="c", major=1, minor=2),
            cdispec.DeviceNode(path="/dev/y", host_path="/dev/null"),
        ),
        mounts=(
            cdispec.Mount(host_path="/h", container_path="/a/b/c"),
            cdispec.Mount(host_path="/h2", container_path="/a"),
        ),
        hooks=(cdispec.Hook(hook_name="prestart", path="/bin/true"),),
        additional_gids=(0, 44),
    )
    out = cdispec.apply_edits(edits, base)
    null = os.stat("/dev/null")
    assert out.env == ("PATH=/bin", "DEV=new", "NEW=1")
    assert out.device_nodes == (
        cdispec.DeviceNode(
            path="/dev/x", host_path="/dev/x", type="c", major=1, minor=2, permissions="rwm"
        ),
        cdispec.DeviceNode(
            path="/dev/y",
            host_path="/dev/null",
            type="c",
            major=os.major(null.st_rdev),
            minor=os.minor(null.st_rdev),
            file_mode=stat.S_IMODE(null.st_mode),
            permissions="rwm",
        ),
    )
    assert [m.container_path for m in out.mounts] == ["/a", "/a/b", "/a/b/c"]
    assert out.hooks == edits.hooks
    assert out.additional_gids == (44,)


def test_load_spec_dirs_reads_json_and_yaml_and_reports_bad_files(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    (etc / "a.yaml").write_text(
        "---\ncdiVersion: 0.3.0\nkind: y.io/c\ndevices:\n"
        "  - name: d\n    containerEdits:\n      env: [A=1]\n"
    )
    (run / "b.json").write_text(json.dumps(_doc()))
    (run / "bad.json").write_text("{")
    (run / "ignored.txt").write_text("x")
    specs, failed = cdispec.load_spec_dirs([etc, run, tmp_path / "missing"])
    assert sorted((s.kind, s.priority) for s in specs) == [(KIND, 1), ("y.io/c", 0)]
    assert list(failed) == [run / "bad.json"]
    assert str(run / "bad.json") in str(failed[run / "bad.json"])


def test_qualified_name_checks_syntax() -> None:
    assert cdispec.qualified_name("v.io/c", "1-x") == "v.io/c=1-x"
    with pytest.raises(cdispec.CdiSpecError):
        cdispec.qualified_name("v.io/c", "x-")
