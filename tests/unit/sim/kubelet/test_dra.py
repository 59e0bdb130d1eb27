"""The simulated kubelet's DRA side, pure parts: CDI devices resolved into container edits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

from lightkube import AsyncClient

from compute_domains.sim.kubelet import config, dra

KIND = "test.compute-domains.dev/claim"


def _manager(root: Path) -> dra.DraManager:
    spec = {
        "cdiVersion": "0.5.0",
        "kind": KIND,
        "devices": [
            {
                "name": "uid-1-dev",
                "containerEdits": {
                    "env": ["TEST_DEVICE=dev"],
                    "deviceNodes": [{"path": "/dev/test-dev", "type": "c", "major": 1, "minor": 3}],
                    "mounts": [{"hostPath": "/var/lib/x", "containerPath": "/x"}],
                },
            }
        ],
    }
    cdi = root / "var/run/cdi"
    cdi.mkdir(parents=True)
    (cdi / "test-uid-1.json").write_text(json.dumps(spec))
    # The CDI resolution reads only the node's folders: no API call, no plugin.
    return dra.DraManager(config.DraSettings(node="n", root=root), cast(AsyncClient, None))


def test_a_device_listed_twice_is_created_once(tmp_path: Path) -> None:
    """After a reboot the kubelet's claim cache lists a re-prepared claim's device twice (the
    checkpointed one and the new one); the runtime injects it once, as containerd does, or the
    container fails on an existing device node."""
    device = f"{KIND}=uid-1-dev"
    env, nodes, mounts = _manager(tmp_path).resolve_cdi([device, device], {}, [])
    assert env == {"TEST_DEVICE": "dev"}
    assert [(n.path, n.major, n.minor) for n in nodes] == [("/dev/test-dev", 1, 3)]
    assert [(m.source, m.target) for m in mounts] == [(str(tmp_path / "var/lib/x"), "/x")]
