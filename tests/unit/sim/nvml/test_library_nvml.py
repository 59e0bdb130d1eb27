"""``plugin.nvmllib.LibraryNvml`` over the built NVML stand-in: several nodes in one process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from compute_domains.plugin import discovery, nvmllib
from compute_domains.sim import driverroot
from compute_domains.sim.nvml import config, profiles


def _node(lib_dir: Path, root: Path, cfg: config.NodeNvmlConfig) -> Path:
    """A node's library folder: its own copy of the library, its config beside it."""
    root.mkdir()
    shutil.copy(lib_dir / nvmllib.LIBRARY_NAME, root / nvmllib.LIBRARY_NAME)
    config.write(root / driverroot.NVML_CONFIG_NAME, cfg)
    return root


def test_each_node_asks_its_own_library_in_one_process(lib_dir: Path, tmp_path: Path) -> None:
    a = _node(lib_dir, tmp_path / "a", profiles.gb200(0, 0))
    b = _node(lib_dir, tmp_path / "b", profiles.gb200(1, 3))
    found = {}
    for name, folder in (("a", a), ("b", b), ("a-again", a)):
        lib = nvmllib.find_library([tmp_path / "missing", folder])
        assert lib == folder / nvmllib.LIBRARY_NAME
        _, gpus = discovery.discover_gpus(nvmllib.LibraryNvml(lib))
        found[name] = discovery.clique_id_of(gpus)
        assert len(gpus) == len(profiles.gb200(0, 0).gpus)
    assert found["a"].startswith(f"{profiles.cluster_uuid(0)}.")
    assert found["b"].startswith(f"{profiles.cluster_uuid(1)}.")
    assert found["a"] != found["b"] and found["a"] == found["a-again"]


def test_a_missing_library_is_an_nvml_error(tmp_path: Path) -> None:
    nvml = nvmllib.LibraryNvml(tmp_path / nvmllib.LIBRARY_NAME)
    with pytest.raises(discovery.DiscoveryError, match="NVML initialisation failed"):
        discovery.discover_gpus(nvml)
