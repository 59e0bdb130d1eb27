"""Container edits of a channel claim: the per-domain channels, or one per-clique channel."""

from __future__ import annotations

from pathlib import Path

import pytest

from compute_domains.plugin import configs, devices, edits
from tests.unit.plugin import fakes

CD = "aaaaaaaa-0000-4000-8000-00000000000a"
FACTS = edits.NodeFacts(
    clique_id=fakes.CLIQUE, channel_major=fakes.CHANNEL_MAJOR, caps_major=fakes.CAPS_MAJOR
)


def _plan(mode: str = "Single", slots: tuple[int, ...] = (0,)) -> configs.Plan:
    claim = fakes.claim(
        "c1",
        [fakes.result(f"channel-{slot}", request=f"r{slot}") for slot in slots],
        [fakes.config_entry(fakes.channel_config(CD, mode))],
    )
    return configs.plan(claim, node=fakes.NODE, offered=devices.allocatable(4))


@pytest.mark.parametrize(
    ("channel", "mode", "want"),
    [
        (None, "Single", [0]),
        (None, "All", list(range(2048))),
        (7, "Single", [7]),
    ],
    ids=["per-domain-single", "per-domain-all", "per-clique-own-channel"],
)
def test_channel_devices_inject_the_cds_channels_and_nothing_else(
    channel: int | None, mode: str, want: list[int]
) -> None:
    out = edits.container_edits(
        _plan(mode, slots=(0, 2)),
        facts=FACTS,
        cd=fakes.compute_domain(CD),
        domain_dir=Path("/folder"),
        channel=channel,
    )
    assert list(out) == ["channel-0", "channel-2"]
    for device in out.values():
        assert [n.minor for n in device.device_nodes] == want
        assert [n.path for n in device.device_nodes][:1] == [
            f"/dev/nvidia-caps-imex-channels/channel{want[0]}"
        ]
        assert [(m.host_path, m.container_path) for m in device.mounts] == [("/folder", "/imexd")]
