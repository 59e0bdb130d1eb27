"""Reading the channel count from the workload stand-in's log lines."""

from __future__ import annotations

import pytest

from compute_domains.bench import channels


@pytest.mark.parametrize(
    ("line", "count"),
    [
        (
            "mnnvl-workload: IMEX channels: 1: /dev/nvidia-caps-imex-channels/channel0 "
            "(char 238:0)",
            1,
        ),
        ("mnnvl-workload: IMEX channels: 12: /dev/x (char 1:2) and 8 more", 12),
        (
            "mnnvl-workload: IMEX channels: none under /dev/nvidia-caps-imex-channels "
            "(no ComputeDomain channel)",
            0,
        ),
        ("mnnvl-workload: host gb200-r1-n01 starting", None),
        ("mnnvl-workload: NOT READY: channels=1 domain=unknown", None),
    ],
)
def test_channel_count(line: str, count: int | None) -> None:
    assert channels.channel_count(line) == count
