"""``plugin.nvmllib.LibraryNvml`` over the built NVML stand-in: several nodes in one process.

Each case runs in a fresh interpreter: a library loaded in a process answers every later
``dlopen`` of its soname there (pynvml's included), so it must not stay in the test process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from compute_domains.plugin import nvmllib
from compute_domains.sim import driverroot
from compute_domains.sim.nvml import config, profiles

_SCRIPT = """
import json, sys
from pathlib import Path
from compute_domains.plugin import discovery, nvmllib
from compute_domains.plugin import nodeinfo
out = []
for folder in sys.argv[1:]:
    lib = nvmllib.find_library([Path(folder) / "missing", Path(folder)])
    try:
        _, gpus = discovery.discover_gpus(nvmllib.LibraryNvml(lib or Path(folder) / "none.so"))
    except nodeinfo.DiscoveryError as err:
        out.append({"lib": str(lib), "error": str(err)})
        continue
    out.append({"lib": str(lib), "gpus": len(gpus), "clique": discovery.clique_id_of(gpus)})
print(json.dumps(out))
"""


def _node(lib_dir: Path, root: Path, cfg: config.NodeNvmlConfig) -> Path:
    """A node's library folder: its own copy of the library, its config beside it."""
    root.mkdir()
    shutil.copy(lib_dir / nvmllib.LIBRARY_NAME, root / nvmllib.LIBRARY_NAME)
    config.write(root / driverroot.NVML_CONFIG_NAME, cfg)
    return root


def _discover(*folders: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, *map(str, folders)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PYTHONDONTWRITEBYTECODE": "1"},
    )
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result


def test_each_node_asks_its_own_library_in_one_process(lib_dir: Path, tmp_path: Path) -> None:
    a = _node(lib_dir, tmp_path / "a", profiles.gb200(0, 0))
    b = _node(lib_dir, tmp_path / "b", profiles.gb200(1, 3))
    first, second, again = _discover(a, b, a)
    assert first["lib"] == str(a / nvmllib.LIBRARY_NAME)
    assert first["gpus"] == second["gpus"] == len(profiles.gb200(0, 0).gpus)
    assert first["clique"].startswith(f"{profiles.cluster_uuid(0)}.")
    assert second["clique"].startswith(f"{profiles.cluster_uuid(1)}.")
    assert again == first


def test_a_missing_library_is_an_nvml_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (result,) = _discover(tmp_path / "empty")
    assert "NVML initialisation failed" in result["error"]
