import pytest

from compute_domains.api import names
from compute_domains.plugin import devices


def test_slots_and_daemon_are_offered_with_upstream_attributes() -> None:
    offered = devices.allocatable(3)
    assert list(offered) == ["channel-0", "channel-1", "channel-2", "daemon-0"]
    assert offered["channel-2"] == devices.Allocatable(
        name="channel-2", type=devices.DeviceType.CHANNEL, id=2
    )
    assert offered["daemon-0"].type is devices.DeviceType.DAEMON


def test_a_free_node_advertises_no_holder() -> None:
    listed = devices.slice_devices(2, "")
    assert listed == [
        {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
        {"name": "channel-1", "attributes": {"type": {"string": "channel"}, "id": {"int": 1}}},
        {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
    ]


def test_a_bound_node_marks_every_channel_slot_but_not_the_daemon() -> None:
    listed = {d["name"]: d["attributes"] for d in devices.slice_devices(2, "cd-uid")}
    assert listed["channel-0"]["domain"] == {"string": "cd-uid"}
    assert listed["channel-1"]["domain"] == {"string": "cd-uid"}
    assert "domain" not in listed["daemon-0"]


def test_slice_spec_is_one_pool_named_after_the_node() -> None:
    spec = devices.slice_spec("node-a", 1, "", 7)
    assert spec["driver"] == names.DRIVER_NAME
    assert spec["nodeName"] == "node-a"
    assert spec["pool"] == {"name": "node-a", "generation": 7, "resourceSliceCount": 1}
    assert devices.slice_name("node-a") == "node-a-compute-domain.nvidia.com"


@pytest.mark.parametrize(
    ("published", "same"),
    [
        (devices.slice_devices(2, "x"), True),
        (list(reversed(devices.slice_devices(2, "x"))), True),
        (devices.slice_devices(2, ""), False),
        (devices.slice_devices(3, "x"), False),
        (None, False),
    ],
    ids=["equal", "order-ignored", "holder-differs", "slot-count-differs", "missing"],
)
def test_drift_detection(published: object, same: bool) -> None:
    assert devices.same_devices(published, devices.slice_devices(2, "x")) is same


def test_selector_accepts_free_or_own_slots() -> None:
    cel = names.channel_selector("u-1")
    assert cel == (
        '!has(device.attributes["compute-domain.nvidia.com"].domain) || '
        'device.attributes["compute-domain.nvidia.com"].domain == "u-1"'
    )
