"""Reading NVIDIA's v25.12 checkpoint: recognised, verified as NVIDIA does, mapped to our model."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from compute_domains.plugin import checkpoint, checkpointfile
from compute_domains.plugin import nvidia_checkpoint as nv
from tests.unit.plugin import nvidia_fixture as fx

Reason = checkpointfile.CorruptionReason
EMPTY = b'{"checksum":1083090442,"v1":{},"v2":{"checksum":4166374854}}'
"""What NVIDIA's v25.12.0 ``MarshalCheckpoint`` writes for a checkpoint without claims."""


def test_checksum_gives_the_values_nvidias_code_computes() -> None:
    # Known answers from NVIDIA's own code: an empty checkpoint and the fixture.
    assert nv.checksum(b'{"checksum":0,"v1":{}}') == 1083090442
    assert nv.checksum(b'{"checksum":0}') == 4166374854
    fixture = json.loads(fx.checkpoint_text(sign=nv.checksum))
    assert (fixture["checksum"], fixture["v2"]["checksum"]) == (fx.TOP_CHECKSUM, fx.V2_CHECKSUM)


def test_an_empty_nvidia_checkpoint_has_no_claims() -> None:
    assert nv.decode(EMPTY) == ()


def test_the_fixture_decodes_into_our_device_model() -> None:
    claims = {c.uid: c for c in nv.decode(fx.checkpoint_text().encode()) or ()}
    assert set(claims) == {fx.WORKLOAD, fx.DAEMON, fx.STALE}
    workload, daemon, stale = claims[fx.WORKLOAD], claims[fx.DAEMON], claims[fx.STALE]
    assert workload.state is checkpoint.ClaimState.PREPARE_COMPLETED
    assert (workload.namespace, workload.name) == ("", "")  # NVIDIA keeps no name once completed
    assert workload.devices == (
        checkpoint.PreparedDevice(
            pool_name=fx.NODE,
            device_name="channel-0",
            request_names=("channel",),
            cdi_device_ids=(f"{fx.CLAIM_KIND}={fx.WORKLOAD}-channel-0",),
            kind="channel",
            domain_uid=fx.CD,
        ),
    )
    assert [(d.kind, d.device_name, d.domain_uid) for d in daemon.devices] == [
        ("daemon", "daemon-0", fx.CD)
    ]
    assert daemon.devices[0].cdi_device_ids[0] == "k8s.compute-domain.nvidia.com/device=all"
    assert stale.state is checkpoint.ClaimState.PREPARE_STARTED
    assert (stale.namespace, stale.name, stale.devices) == (fx.STALE_NAMESPACE, fx.STALE_NAME, ())
    assert stale.ref == f"{fx.STALE_NAMESPACE}/{fx.STALE_NAME} ({fx.STALE})"
    assert stale.status["allocation"]["devices"]["results"][0]["device"] == "channel-0"


def test_a_v1_only_file_of_an_older_release_lists_completed_claims() -> None:
    text = fx.checkpoint_text(sign=nv.checksum, with_v2=False)
    claims = nv.decode(text.encode()) or ()
    assert {c.uid: c.state for c in claims} == {
        fx.WORKLOAD: checkpoint.ClaimState.PREPARE_COMPLETED,
        fx.DAEMON: checkpoint.ClaimState.PREPARE_COMPLETED,
    }


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(
            b'{"checksum":"sha256:00","claims":{},"nodeBootID":"","version":2}', id="ours"
        ),
        pytest.param(b'{"checksum":12,"v1":{}', id="truncated"),
        pytest.param(b"\x00\x17garbage", id="binary"),
        pytest.param(b'{"v1":{},"v2":{}}', id="no-checksum"),
        pytest.param(b'{"checksum":1,"v1":{},"version":1}', id="extra-key"),
        pytest.param(b"[1,2]", id="array"),
    ],
)
def test_content_that_is_not_nvidias_layout_is_left_to_our_reader(data: bytes) -> None:
    assert nv.decode(data) is None


def _swap(old: str, new: str) -> Callable[[str], str]:
    return lambda text: text.replace(old, new, 1)


def _resigned(mutate: Callable[[dict[str, Any]], None]) -> Callable[[str], str]:
    """Change the v2 claims, then sign the file correctly: only the layout check may object."""

    def build(_text: str) -> str:
        claims = fx.claims()
        mutate(claims)
        return fx.checkpoint_text(claims, sign=nv.checksum)

    return build


def _state(claims: dict[str, Any]) -> None:
    claims[fx.STALE]["checkpointState"] = "UnprepareStarted"


def _both_kinds(claims: dict[str, Any]) -> None:
    device = claims[fx.WORKLOAD]["preparedDevices"][0]["devices"][0]
    device["daemon"] = device["channel"]


def _rc2_layout(_text: str) -> str:
    group = fx.claims()[fx.WORKLOAD]["preparedDevices"]
    top: dict[str, object] = {"checksum": 0, "v1": {"preparedClaims": {fx.WORKLOAD: group}}}
    top["checksum"] = nv.checksum(fx.compact(top).encode())
    return fx.compact(top)


def _reindented(text: str) -> str:
    return json.dumps(json.loads(text), indent=2)


def _v2_array(text: str) -> str:
    """``v2`` (the last member) wrapped in an array; the top-level checksum does not cover it."""
    return text.replace('"v2":{', '"v2":[{', 1)[:-1] + "]}"


@pytest.mark.parametrize(
    ("tamper", "reason", "words"),
    [
        (
            _swap(f'"checksum":{fx.TOP_CHECKSUM}', '"checksum":1'),
            Reason.CHECKSUM_MISMATCH,
            "top-level",
        ),
        (
            _swap(f'"checksum":{fx.V2_CHECKSUM}', '"checksum":1'),
            Reason.CHECKSUM_MISMATCH,
            "v2 checksum",
        ),
        # A changed value under the old checksums: v1 holds the completed claims and catches it.
        (
            _swap('"DeviceName":"channel-0"', '"DeviceName":"channel-5"'),
            Reason.CHECKSUM_MISMATCH,
            "top-level",
        ),
        # The started claim lives in v2 only.
        (_swap(fx.STALE_NAME, "someone-else"), Reason.CHECKSUM_MISMATCH, "v2 checksum"),
        # NVIDIA re-marshals before hashing and would accept this; we hash the text as it stands.
        (_reindented, Reason.CHECKSUM_MISMATCH, "top-level"),
        (_resigned(_state), Reason.INVALID_LAYOUT, "'UnprepareStarted'"),
        (_resigned(_both_kinds), Reason.INVALID_LAYOUT, "a channel or a daemon"),
        (_rc2_layout, Reason.INVALID_LAYOUT, "v25.3.0-rc.2"),
        (_v2_array, Reason.INVALID_LAYOUT, "expected a JSON object"),
    ],
    ids=[
        "top-checksum",
        "v2-checksum",
        "v1-content",
        "v2-content",
        "reindented",
        "unknown-state",
        "channel-and-daemon",
        "rc2-layout",
        "v2-not-an-object",
    ],
)
def test_a_damaged_nvidia_file_is_refused_with_a_reason_naming_the_format(
    tamper: Callable[[str], str], reason: Reason, words: str
) -> None:
    data = tamper(fx.checkpoint_text()).encode()
    with pytest.raises(checkpointfile.CheckpointCorruptError) as caught:
        nv.decode(data)
    assert caught.value.reason is reason
    assert nv.FORMAT_NAME in str(caught.value) and words in str(caught.value)


def test_the_untampered_fixture_passes_the_same_checks() -> None:
    # The counterpart of the table above: the checks pass on NVIDIA's bytes as written.
    assert nv.decode(fx.checkpoint_text().encode()) is not None
    assert nv.is_nvidia_layout(json.loads(fx.checkpoint_text()))
    assert not nv.is_nvidia_layout(json.loads(checkpointfile.encode(checkpoint.Checkpoint())))
