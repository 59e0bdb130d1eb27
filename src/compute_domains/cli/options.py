"""Where the environment is read: default folders and the tool-build settings built from it."""

from __future__ import annotations

import os
from pathlib import Path

from compute_domains.sim import toolchain


def repo_root() -> Path:
    """The source checkout this package runs from (tools/ and deploy/ live there)."""
    return Path(__file__).resolve().parents[3]


def chart_dir() -> Path:
    """The project's Helm chart in this checkout."""
    return repo_root() / "deploy" / "helm" / "compute-domains"


def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/compute-domains/tools``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "compute-domains" / "tools"


def sim_home() -> Path:
    """``${CD_SIM_HOME:-~/.local/state/compute-domains}``."""
    default = Path.home() / ".local" / "state" / "compute-domains"
    return Path(os.environ.get("CD_SIM_HOME") or default)


def toolchain_settings() -> toolchain.ToolchainSettings:
    """Tool-build settings for this checkout and this user's cache."""
    return toolchain.ToolchainSettings(
        tools_src=repo_root() / "tools",
        cache_root=cache_root(),
        go=os.environ.get("CD_GO", "go"),
        prebuilt=Path(os.environ["CD_TOOLS_DIR"]) if os.environ.get("CD_TOOLS_DIR") else None,
    )
