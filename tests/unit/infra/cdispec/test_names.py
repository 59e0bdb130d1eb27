"""CDI naming and version rules: kinds, device names, versions and the minimum version."""

from __future__ import annotations

from typing import Any

import pytest

from compute_domains.infra import cdispec
from compute_domains.infra.cdispec import names


@pytest.mark.parametrize(
    ("kind", "ok"),
    [
        ("nvidia.com/gpu", True),
        ("k8s.compute-domain.nvidia.com/claim", True),
        ("a/b", True),
        ("vendor_1/class-2", True),
        ("v.io/gpu.v2", True),
        ("no-slash", False),
        ("1vendor/c", False),
        ("vendor-/c", False),
        ("v/1class", False),
        ("v/class.", False),
        ("v/cl@ss", False),
        ("v/c/d", False),
        ("/c", False),
        ("v/", False),
    ],
)
def test_kind_syntax(kind: str, ok: bool) -> None:
    if ok:
        assert names.check_kind(kind) == kind
    else:
        with pytest.raises(cdispec.CdiSpecError, match="invalid CDI kind"):
            names.check_kind(kind)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("all", True),
        ("0", True),
        ("uid-1-channel-0", True),
        ("GPU-1a2b:mig.1_2", True),
        ("-x", False),
        ("x-", False),
        ("x:", False),
        ("a/b", False),
        ("a=b", False),
        ("", False),
    ],
)
def test_device_name_syntax(name: str, ok: bool) -> None:
    if ok:
        assert cdispec.qualified_name("v.io/c", name) == f"v.io/c={name}"
    else:
        with pytest.raises(cdispec.CdiSpecError, match="invalid CDI device name"):
            cdispec.qualified_name("v.io/c", name)


@pytest.mark.parametrize(
    ("version", "want"),
    [
        ("0.3.0", "0.3.0"),
        ("v0.5.0", "0.5.0"),
        ("1.1.0", "1.1.0"),
        ("1.2.0", None),
        ("0.3", None),
        ("latest", None),
    ],
)
def test_only_versions_a_runtime_knows_are_accepted(version: str, want: str | None) -> None:
    if want is not None:
        assert names.check_version(version) == want
    else:
        with pytest.raises(cdispec.CdiSpecError, match="invalid version"):
            names.check_version(version)


def _doc(version: str, kind: str = "v.io/c", name: str = "d", **edits: Any) -> dict[str, Any]:
    return {
        "cdiVersion": version,
        "kind": kind,
        "devices": [{"name": name, "containerEdits": edits or {"env": ["A=1"]}}],
    }


@pytest.mark.parametrize(
    ("doc", "need"),
    [
        (_doc("0.3.0", name="1d"), "0.5.0"),
        (_doc("0.4.0", deviceNodes=[{"path": "/dev/x", "hostPath": "/dev/y"}]), "0.5.0"),
        (_doc("0.5.0", kind="v.io/c.x"), "0.6.0"),
        (_doc("0.6.0", additionalGids=[3]), "0.7.0"),
        (_doc("1.0.0", netDevices=[{"hostInterfaceName": "e", "name": "e"}]), "1.1.0"),
    ],
    ids=["digit-name", "host-path", "dotted-class", "gids", "net-devices"],
)
def test_a_version_below_what_the_fields_need_is_rejected(doc: dict[str, Any], need: str) -> None:
    with pytest.raises(cdispec.CdiSpecError, match=f"must be at least v{need}"):
        cdispec.parse_spec(doc)
    assert cdispec.parse_spec({**doc, "cdiVersion": need}).version == need


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ({"hooks": [{"hookName": "prestart", "path": "/x", "env": ["NOEQ"]}]}, "hook env"),
        ({"mounts": [{"hostPath": "", "containerPath": "/c"}]}, "invalid mount"),
        ({"deviceNodes": [{"path": ""}]}, "without a path"),
        ({"deviceNodes": [{"path": "/dev/x", "type": "x"}]}, "invalid type"),
    ],
    ids=["hook-env", "empty-mount-path", "empty-node-path", "node-type"],
)
def test_edits_the_library_rejects_fail_the_spec(edits: dict[str, Any], message: str) -> None:
    with pytest.raises(cdispec.CdiSpecError, match=message):
        cdispec.parse_spec(_doc("1.1.0", **edits))
