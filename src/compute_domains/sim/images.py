"""What an image means on a simulated node: there is no registry, so a small table decides.

* the project's own image (any reference whose repository ends in ``compute-domains``) runs the
  project's entry points: its command is looked up on a PATH that holds this installation's
  console scripts (``cdctl``) and the simulator's stand-ins (``nvidia-imex``, ...);
* ``registry.k8s.io/pause`` sleeps until stopped;
* any other image runs the container's command with the host's tools; an image without a
  command fails the way a runtime does when an image has no entrypoint.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageError(Exception):
    """The image cannot be run here (shown as the container's waiting message)."""


def repository(image: str) -> str:
    """The repository part of an image reference (no registry port, tag or digest)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)
    if ":" in last[-1]:
        ref = ref[: ref.rfind(":")]
    return ref


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImageRegistry:
    """The table of simulated images of one cluster."""

    stand_in_bin: Path | None = None
    """Folder with the simulator's stand-in executables (``nvidia-imex``, ``mnnvl-workload``)."""
    project_bin: Path = Path(sys.executable).parent
    """Folder with this installation's console scripts (``cdctl``)."""

    def is_project(self, image: str) -> bool:
        """True for the project's own image."""
        return repository(image).rsplit("/", 1)[-1] == "compute-domains"

    def command(self, image: str, command: list[str], args: list[str]) -> list[str]:
        """The argv a container of this image runs."""
        repo = repository(image)
        if repo.endswith("/pause") or repo == "pause":
            return ["sleep", "infinity"]
        argv = command + args
        if not argv:
            raise ImageError(
                f'image "{image}" has no entrypoint here: give the container a command'
            )
        return argv

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """Container environment with PATH leading to the project's tools and stand-ins."""
        out = dict(env)
        parts = [str(p) for p in (self.stand_in_bin, self.project_bin) if p is not None]
        out["PATH"] = ":".join([*parts, env.get("PATH", _PATH)])
        return out
