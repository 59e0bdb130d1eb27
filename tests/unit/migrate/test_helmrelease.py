"""helm's release record: read, marked to keep one object, and its user values."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import pytest
import yaml

from compute_domains.migrate import helmrelease, prepare

# A manifest as helm stores it: documents after `---`, each with its `# Source:` comment.
MANIFEST = """---
# Source: nvidia-dra-driver-gpu/templates/rbac-compute-domain-daemon.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: compute-domain-daemon-service-account
  namespace: nvidia-dra-driver-gpu
---
# Source: nvidia-dra-driver-gpu/templates/rbac-controller.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: nvidia-dra-driver-gpu-service-account-controller
  namespace: nvidia-dra-driver-gpu
---
# Source: nvidia-dra-driver-gpu/templates/rbac-compute-domain-daemon.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: compute-domain-daemon-role
rules: []
"""
RELEASE: dict[str, Any] = {
    "name": "nvidia-dra-driver-gpu",
    "version": 1,
    "config": {
        "nvidiaDriverRoot": "/run/nvidia/driver",
        "resources": {"gpus": {"enabled": False}},
        "image": {"tag": "v25.12.0"},
        "featureGates": {},
    },
    "manifest": MANIFEST,
}
SA = "compute-domain-daemon-service-account"


def _as_secret_data(release: dict[str, Any]) -> str:
    """What helm writes (base64 of gzip of JSON), as the API returns it (base64 again)."""
    inner = base64.b64encode(gzip.compress(json.dumps(release).encode()))
    return base64.b64encode(inner).decode()


def _docs(manifest: str) -> list[Any]:
    return [d for d in yaml.safe_load_all(manifest) if d]


def test_decode_reads_what_helm_writes_and_encode_round_trips() -> None:
    assert helmrelease.decode(_as_secret_data(RELEASE)) == RELEASE
    assert helmrelease.decode(helmrelease.encode(RELEASE)) == RELEASE


def test_decode_refuses_what_is_not_a_release() -> None:
    with pytest.raises(helmrelease.ReleaseError, match="not a helm release record"):
        helmrelease.decode(base64.b64encode(b"hello").decode())
    with pytest.raises(helmrelease.ReleaseError, match="no manifest"):
        helmrelease.decode(_as_secret_data({"name": "x"}))  # type: ignore[dict-item]


def test_keep_marks_only_the_named_object() -> None:
    changed, did = helmrelease.keep(RELEASE, "ServiceAccount", SA)
    assert did
    before, after = _docs(MANIFEST), _docs(changed["manifest"])
    assert after[0]["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    after[0]["metadata"].pop("annotations")
    assert after == before
    assert (
        "# Source: nvidia-dra-driver-gpu/templates/rbac-compute-domain-daemon.yaml"
        in (changed["manifest"].split("---")[1])
    )
    assert helmrelease.kept(changed, "ServiceAccount", SA)
    assert not helmrelease.kept(RELEASE, "ServiceAccount", SA)
    assert {k: v for k, v in changed.items() if k != "manifest"} == {
        k: v for k, v in RELEASE.items() if k != "manifest"
    }


def test_keep_twice_changes_nothing_more() -> None:
    once, _ = helmrelease.keep(RELEASE, "ServiceAccount", SA)
    twice, did = helmrelease.keep(once, "ServiceAccount", SA)
    assert not did and twice == once


def test_keep_names_what_the_manifest_lacks() -> None:
    with pytest.raises(helmrelease.ReleaseError, match="lists no ServiceAccount 'nope'"):
        helmrelease.keep(RELEASE, "ServiceAccount", "nope")
    with pytest.raises(helmrelease.ReleaseError, match="lists no ServiceAccount"):
        helmrelease.keep(RELEASE, "ServiceAccount", "compute-domain-daemon-role")


def test_user_values_are_flattened_and_image_is_left_out() -> None:
    values = helmrelease.user_values(RELEASE)
    assert values == [
        ("nvidiaDriverRoot", "/run/nvidia/driver"),
        ("resources.gpus.enabled", False),
        ("image.tag", "v25.12.0"),
        ("featureGates", {}),
    ]
    done = prepare.Prepared(
        revision=1,
        account_uid="u",
        record_changed=True,
        carried=tuple(v for v in values if not v[0].startswith(prepare.NOT_CARRIED)),
        left_out=(),
    )
    assert done.set_flags() == (
        "--set-json 'nvidiaDriverRoot=\"/run/nvidia/driver\"' "
        "--set-json resources.gpus.enabled=false --set-json 'featureGates={}'"
    )
