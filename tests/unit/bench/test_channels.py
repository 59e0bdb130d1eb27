"""Reading the channel count from the workload stand-in's log lines."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from compute_domains.bench import channels
from compute_domains.infra import kube


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


async def test_a_log_with_no_server_to_answer_counts_as_not_read(tmp_path: Path) -> None:
    """A real client, and nothing listening where its API server should be (the 16-core
    machine at 4,608 nodes ran out of ports to connect from): the log is reported as not read
    after a few tries, never as a pod without its channel, and nothing is raised."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": f"https://127.0.0.1:{port}",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    client = kube.client(kube.KubeSettings(kubeconfig=kubeconfig, field_manager="test"))
    verdict = await channels._checked(client, "w-0", ns="bench")
    assert verdict.startswith("pod w-0: log not read (ConnectError")
