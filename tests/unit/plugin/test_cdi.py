import json
from pathlib import Path

import pytest

from compute_domains.infra import cdispec
from compute_domains.plugin import cdi

UID_DIGIT = "1b2c3d4e-0000-4000-8000-000000000001"
UID_LETTER = "ab2c3d4e-0000-4000-8000-000000000001"


def test_channel_claim_spec_matches_the_documented_shape() -> None:
    claim = cdi.build_claim_spec(UID_DIGIT, {"channel-0": cdi.channel_edits([0], major=234)})
    assert claim is not None
    assert claim.device_ids == {
        "channel-0": f"k8s.compute-domain.nvidia.com/claim={UID_DIGIT}-channel-0"
    }
    assert cdispec.spec_document(claim.spec) == {
        "cdiVersion": "0.5.0",
        "kind": "k8s.compute-domain.nvidia.com/claim",
        "devices": [
            {
                "name": f"{UID_DIGIT}-channel-0",
                "containerEdits": {
                    "deviceNodes": [
                        {
                            "path": "/dev/nvidia-caps-imex-channels/channel0",
                            "type": "c",
                            "major": 234,
                            "minor": 0,
                            "fileMode": 438,
                        }
                    ]
                },
            }
        ],
    }


@pytest.mark.parametrize(
    ("uid", "version"), [(UID_DIGIT, "0.5.0"), (UID_LETTER, "0.3.0")], ids=["digit", "letter"]
)
def test_version_is_the_lowest_that_covers_the_device_names(uid: str, version: str) -> None:
    claim = cdi.build_claim_spec(uid, {"channel-0": cdi.channel_edits([3], major=1)})
    assert claim is not None
    assert claim.spec.version == version


def test_devices_without_edits_get_no_cdi_device_and_no_spec() -> None:
    assert cdi.build_claim_spec(UID_DIGIT, {"channel-0": cdispec.ContainerEdits()}) is None
    claim = cdi.build_claim_spec(
        UID_DIGIT,
        {"channel-0": cdispec.ContainerEdits(), "daemon-0": cdispec.ContainerEdits(env=("A=1",))},
    )
    assert claim is not None
    assert list(claim.device_ids) == ["daemon-0"]
    assert [d.name for d in claim.spec.devices] == [f"{UID_DIGIT}-daemon-0"]


def test_all_mode_lists_every_channel_node_in_order() -> None:
    edits = cdi.channel_edits(range(2048), major=242)
    assert len(edits.device_nodes) == 2048
    assert edits.device_nodes[7] == cdispec.DeviceNode(
        path="/dev/nvidia-caps-imex-channels/channel7",
        type="c",
        major=242,
        minor=7,
        file_mode=0o666,
    )


def test_daemon_edits_carry_identity_mount_and_capability_node(tmp_path: Path) -> None:
    node = cdi.caps_device_node(minor=1, major=511, file_mode=0o400)
    edits = cdi.daemon_edits(
        clique_id="c.1",
        domain_uid="cd-uid",
        domain_name="cd",
        domain_namespace="ns",
        domain_dir=tmp_path / "domains" / "cd-uid",
        device_nodes=[node],
    )
    assert edits.env == (
        "CLIQUE_ID=c.1",
        "COMPUTE_DOMAIN_UUID=cd-uid",
        "COMPUTE_DOMAIN_NAME=cd",
        "COMPUTE_DOMAIN_NAMESPACE=ns",
    )
    assert edits.mounts == (
        cdispec.Mount(
            host_path=str(tmp_path / "domains" / "cd-uid"),
            container_path="/imexd",
            options=("rw", "nosuid", "nodev", "bind"),
        ),
    )
    assert edits.device_nodes == (
        cdispec.DeviceNode(
            path="/dev/nvidia-caps/nvidia-cap1", type="c", major=511, minor=1, file_mode=0o400
        ),
    )


def test_written_spec_is_what_a_runtime_resolves(tmp_path: Path) -> None:
    writer = cdi.CdiWriter(tmp_path / "cdi")
    edits = {
        "channel-0": cdi.channel_edits([5], major=242),
        "daemon-0": cdispec.ContainerEdits(env=("CLIQUE_ID=x.1",)),
    }
    claim = cdi.build_claim_spec(UID_DIGIT, edits)
    assert claim is not None
    path = writer.write_claim_spec(claim)
    assert path == tmp_path / "cdi" / f"k8s.compute-domain.nvidia.com-claim_{UID_DIGIT}.json"
    assert path.stat().st_mode & 0o777 == 0o644
    specs, failed = cdispec.load_spec_dirs([tmp_path / "cdi"])
    assert failed == {}
    merged = cdispec.container_edits_for(list(claim.device_ids.values()), specs)
    assert merged.env == ("CLIQUE_ID=x.1",)
    assert [n.minor for n in merged.device_nodes] == [5]
    assert json.loads(path.read_text()) == cdispec.spec_document(claim.spec)
    assert writer.claim_uids() == [UID_DIGIT]


def test_remove_is_idempotent(tmp_path: Path) -> None:
    writer = cdi.CdiWriter(tmp_path)
    claim = cdi.build_claim_spec(UID_LETTER, {"channel-0": cdi.channel_edits([0], major=1)})
    assert claim is not None
    writer.write_claim_spec(claim)
    assert writer.remove_claim_spec(UID_LETTER) is True
    assert writer.remove_claim_spec(UID_LETTER) is False
    assert writer.claim_uids() == []
    assert cdi.CdiWriter(tmp_path / "absent").claim_uids() == []


def test_slashes_in_ids_are_not_path_separators() -> None:
    assert cdi.claim_spec_file_name("a/b") == "k8s.compute-domain.nvidia.com-claim_a_b.json"


def test_base_device_id_names_the_base_spec() -> None:
    assert cdi.BASE_DEVICE_ID == "k8s.compute-domain.nvidia.com/device=all"
