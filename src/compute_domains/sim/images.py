"""What an image means on a simulated node: there is no registry, so a small table decides.

* the project's own image (any reference whose repository ends in ``compute-domains``) runs the
  project's entry points: its command is looked up on a PATH that holds this installation's
  console scripts (``cdctl``), and nothing else of the simulator's: like the real image it has
  no NVIDIA software, so the IMEX daemon reaches ``nvidia-imex`` only through the CDI base spec
  that mounts it from the node's driver root. A tag listed in ``releases`` (an earlier release
  installed by ``sim.releases``) puts that release's ``bin`` there instead, so ``helm upgrade``
  between chart versions really changes the code;
* an image in the *image map* (repository → folder, e.g. a build of another driver) is that
  folder: its files lie over the host's ``/usr``, ``/etc``, ``/opt`` and appear at their own
  top-level paths (``/templates``), and its command runs as written;
* ``registry.k8s.io/pause`` sleeps until stopped;
* any other image runs the container's command with the host's tools, plus the simulator's
  stand-ins for user programs (``mnnvl-workload``); an image without a command fails the way a
  runtime does when an image has no entrypoint.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
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


def tag(image: str) -> str:
    """The tag of an image reference; ``latest`` when it has none (a digest is not a tag)."""
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else "latest"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImageRegistry:
    """The table of simulated images of one cluster."""

    stand_in_bin: Path | None = None
    """Folder with the simulator's stand-ins for user programs (``mnnvl-workload``), on the PATH
    of user images only."""
    project_bin: Path = Path(sys.executable).parent
    """Folder with this installation's console scripts (``cdctl``)."""
    releases: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    """Project image tag → ``bin`` folder of that earlier release's installation; any tag not
    listed runs this installation (``project_bin``)."""
    image_map: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    """Image repository (no tag) → folder holding that image's files."""

    def is_project(self, image: str) -> bool:
        """True for the project's own image."""
        return repository(image).rsplit("/", 1)[-1] == "compute-domains"

    def image_root(self, image: str) -> Path | None:
        """The folder of a mapped image's files; None for any other image."""
        return self.image_map.get(repository(image))

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

    def bin_dir(self, image: str) -> Path:
        """Where the project's console scripts of this image come from."""
        if self.is_project(image):
            return self.releases.get(tag(image), self.project_bin)
        return self.project_bin

    def environment(self, env: dict[str, str], image: str) -> dict[str, str]:
        """Container environment; PATH leads to what the image holds (see the module doc)."""
        out = dict(env)
        if self.image_root(image) is not None:
            parts: list[Path | None] = []
        elif self.is_project(image):
            parts = [self.bin_dir(image)]
        else:
            parts = [self.stand_in_bin, self.bin_dir(image)]
        lead = [str(p) for p in parts if p is not None]
        out["PATH"] = ":".join([*lead, env.get("PATH", _PATH)])
        return out
