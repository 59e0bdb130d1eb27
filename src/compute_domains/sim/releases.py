"""Earlier releases of the project, installed side by side so a sim can run them (upgrade tests).

A release is an annotated git tag (``v0.1.0``) of this repository. ``prepare`` exports the tag's
tree with ``git archive`` into ``<cache>/<tag>-<commit>/src`` and installs it, non-editable, into
its own virtual environment ``<cache>/<tag>-<commit>/venv``: the release's code is copied into
that venv's site-packages, so its ``cdctl`` imports nothing of this checkout. Dependencies are
pinned to the versions this installation runs (``pip freeze`` as a constraints file), so pip's
cache serves them and both versions run on the same libraries.

``link`` offers a prepared release to one sim: ``<sim home>/releases/<image tag>`` points at the
release's venv, where the image tag is the release chart's ``appVersion`` (what its chart puts
in the image reference). ``installed`` reads that folder back when the sim starts; the sim's
image table (``images.ImageRegistry.releases``) then runs that image tag from the release's
``bin``, while every other tag keeps running this installation.

Invariants:
- The cache folder is keyed by the tag's commit, so a moved tag is prepared afresh.
- A release counts as prepared only when its ``prepared`` marker exists, written last; a folder
  left by a killed run is removed and redone. A file lock serialises concurrent preparers.
- All functions here block (git, pip); async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from compute_domains.infra import filelock
from compute_domains.sim import errors

logger = logging.getLogger(__name__)

CHART_PATH = Path("deploy/helm/compute-domains")
"""The chart folder inside a release's tree."""
_MARKER = "prepared"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReleaseSettings:
    """Which release to prepare, from where, into where."""

    repo: Path
    """The git checkout holding the release tag."""
    tag: str
    """The release's git tag, e.g. ``v0.1.0``."""
    cache_root: Path
    """Folder holding prepared releases (``~/.cache/compute-domains/releases``)."""
    python: str = sys.executable
    """Interpreter whose installation pins the dependency versions; it also creates the venv."""
    timeout_s: float = 900.0
    """Bound on each git or pip step, in seconds (pip may download wheels once)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Release:
    """A prepared release."""

    tag: str
    """The git tag it was made from."""
    commit: str
    """The tag's commit."""
    version: str
    """The chart's ``appVersion``: the image tag its chart deploys by default."""
    root: Path
    """``<cache>/<tag>-<commit>``: ``src`` (the tag's tree) and ``venv`` live there."""

    @property
    def venv(self) -> Path:
        """The release's virtual environment."""
        return self.root / "venv"

    @property
    def bin_dir(self) -> Path:
        """Folder with the release's console scripts (``cdctl``)."""
        return self.venv / "bin"

    @property
    def chart(self) -> Path:
        """The release's Helm chart."""
        return self.root / "src" / CHART_PATH


def _run(argv: list[str], timeout: float, what: str) -> bytes:
    try:
        res = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise errors.SimError(f"{what}: {err}") from err
    if res.returncode != 0:
        tail = (res.stdout + res.stderr).decode(errors="replace").strip()[-3000:]
        raise errors.SimError(f"{what} failed (exit {res.returncode}):\n{tail}")
    out: bytes = res.stdout
    return out


def tag_commit(repo: Path, tag: str) -> str:
    """The commit a tag points at; a clear error when the tag is missing."""
    res = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if res.returncode != 0:
        raise errors.SimError(
            f"git tag {tag} is not in {repo}: the upgrade test installs that release. A full "
            f"clone copies tags; in a shallow or tag-less checkout run `git fetch --tags` "
            f"(see docs/upgrade.md, 'Releases')"
        )
    return res.stdout.strip()


def _export(repo: Path, commit: str, dest: Path, timeout: float) -> None:
    data = _run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit],
        timeout,
        f"git archive {commit}",
    )
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")


def _constraints(python: str, dest: Path, timeout: float) -> Path:
    """This installation's dependency versions, as a pip constraints file."""
    frozen = _run(
        [python, "-m", "pip", "freeze", "--exclude-editable"],
        timeout,
        "pip freeze of this installation",
    ).decode()
    pins = [
        line
        for line in frozen.splitlines()
        if "==" in line and not line.lower().startswith("compute-domains==")
    ]
    dest.write_text("\n".join(pins) + "\n")
    return dest


def _install(settings: ReleaseSettings, commit: str, root: Path) -> None:
    src, venv = root / "src", root / "venv"
    _export(settings.repo, commit, src, settings.timeout_s)
    _run([settings.python, "-m", "venv", str(venv)], settings.timeout_s, "python -m venv")
    constraints = _constraints(settings.python, root / "constraints.txt", settings.timeout_s)
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--constraint",
            str(constraints),
            str(src),
        ],
        settings.timeout_s,
        f"pip install of release {settings.tag}",
    )


def _version(chart: Path) -> str:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    return str(meta["appVersion"])


def prepare(settings: ReleaseSettings) -> Release:
    """Install the tagged release into the cache unless it is there already; return it.

    Raises:
        SimError: the tag is missing, or git, venv or pip failed (the message has their output).
    """
    commit = tag_commit(settings.repo, settings.tag)
    root = settings.cache_root / f"{settings.tag}-{commit[:12]}"
    settings.cache_root.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(
        settings.cache_root / f".{root.name}.lock",
        timeout=settings.timeout_s * 2,
        owner=f"prepare {settings.tag}",
    )
    with lock:
        if not (root / _MARKER).exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            logger.info("installing release %s (%s) into %s", settings.tag, commit[:12], root)
            _install(settings, commit, root)
            (root / _MARKER).write_text(json.dumps({"tag": settings.tag, "commit": commit}))
    release = Release(tag=settings.tag, commit=commit, version="", root=root)
    return dataclasses.replace(release, version=_version(release.chart))


def link(release: Release, sim_home: Path) -> Path:
    """Offer a prepared release to the sims of ``sim_home`` under its image tag; the link."""
    folder = sim_home / "releases"
    folder.mkdir(parents=True, exist_ok=True)
    entry = folder / release.version
    if entry.is_symlink() or entry.exists():
        entry.unlink()
    entry.symlink_to(release.venv)
    return entry


def installed(folder: Path) -> dict[str, Path]:
    """Image tag → resolved ``bin`` folder of every release offered in ``folder``."""
    if not folder.is_dir():
        return {}
    return {
        entry.name: (entry / "bin").resolve()
        for entry in sorted(folder.iterdir())
        if (entry / "bin" / "cdctl").exists()
    }
