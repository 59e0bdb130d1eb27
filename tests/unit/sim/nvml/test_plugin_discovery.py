"""The plugin's own NVML discovery against the simulator's NVML library, profile by profile.

Each case runs ``plugin.discovery.NvmlDiscovery`` in a fresh interpreter (nvidia-ml-py loads one
library per process) with ``LD_LIBRARY_PATH`` pointing at the stand-in and ``MOCK_NVML_CONFIG``
at a node config: GB200 in a multi-node NVLink domain, a non-MNNVL node (all-zero cluster UUID),
a fabric still registering (strict mode refuses to start), and GPUs of one node reporting two
different clique ids (refused).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from compute_domains.sim import driverroot
from compute_domains.sim.nvml import config, profiles

_SCRIPT = """
import json, sys
from pathlib import Path
from compute_domains.plugin import discovery
from compute_domains.plugin import nodeinfo
try:
    info = discovery.NvmlDiscovery(proc_devices=Path(sys.argv[1])).discover()
    print(json.dumps({"clique": info.clique_id, "gpus": len(info.gpus),
                      "channel_major": info.channel_major, "driver": info.driver_version}))
except nodeinfo.DiscoveryError as err:
    print(json.dumps({"error": str(err)}))
"""


def _discover(lib_dir: Path, tmp_path: Path, cfg: config.NodeNvmlConfig) -> dict[str, object]:
    cfg_path = tmp_path / "nvml.cfg"
    config.write(cfg_path, cfg)
    devices = tmp_path / "devices"
    devices.write_text(driverroot.proc_devices())
    env = config.process_env(lib_dir, cfg_path)
    res = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(devices)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    doc: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
    return doc


def test_gb200_mnnvl_node_has_the_racks_clique(lib_dir: Path, tmp_path: Path) -> None:
    got = _discover(lib_dir, tmp_path, profiles.gb200(3, 5))
    assert got["clique"] == f"{profiles.cluster_uuid(3)}.{profiles.DEFAULT_CLIQUE_ID}"
    assert got["gpus"] == 4
    assert got["channel_major"] == driverroot.IMEX_CHANNEL_MAJOR


def test_non_mnnvl_node_has_no_clique(lib_dir: Path, tmp_path: Path) -> None:
    got = _discover(lib_dir, tmp_path, profiles.h200(0, 0))
    assert got["clique"] == ""


def test_fabric_in_progress_refuses_to_start(lib_dir: Path, tmp_path: Path) -> None:
    got = _discover(lib_dir, tmp_path, profiles.fabric_in_progress(0, 1))
    assert "error" in got


@pytest.mark.parametrize("second", [2, 7])
def test_mixed_clique_ids_are_refused(lib_dir: Path, tmp_path: Path, second: int) -> None:
    cfg = profiles.gb200(0, 2)
    gpus = list(cfg.gpus)
    other = config.FabricInfo(
        cluster_uuid=cfg.cluster_uuid,
        clique_id=second,
        state=config.FabricState.COMPLETED,
        health_mask=config.HEALTH_MASK_HEALTHY,
        health_summary=config.HealthSummary.HEALTHY,
    )
    gpus[-1] = dataclasses.replace(gpus[-1], fabric=other)
    got = _discover(lib_dir, tmp_path, dataclasses.replace(cfg, gpus=tuple(gpus)))
    assert "error" in got
    assert "clique" in str(got["error"]).lower()
