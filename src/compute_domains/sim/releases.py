"""Earlier builds of the project, installed side by side so a sim can run them (upgrade tests).

A release is built from a commit of this repository's history, named by its hash or by a tag
(``v0.1.0``). ``prepare`` exports that commit's tree with ``git archive`` into
``<cache>/<name>/src``, optionally stamps it with a version of its own, and installs it,
non-editable, into its own virtual environment ``<cache>/<name>/venv``: the release's code is
copied into that venv's site-packages, so its ``cdctl`` imports nothing of this checkout.
Dependencies are pinned to the versions this installation runs (``pip freeze`` as a constraints
file), so pip's cache serves them and both versions run on the same libraries.

Stamping is what a release build does (``helm package --app-version``, a build's own package
version): it writes one version into ``pyproject.toml``, ``__version__`` and the chart's
``version``/``appVersion``, so a build of a commit whose tree still says this checkout's version
gets an image tag, and a ``cdctl --version``, of its own.

``link`` offers a prepared release to one sim: ``<sim home>/releases/<image tag>`` points at the
release's venv, where the image tag is the release chart's ``appVersion`` (what its chart puts
in the image reference). ``installed`` reads that folder back when the sim starts; the sim's
image table (``images.ImageRegistry.releases``) then runs that image tag from the release's
``bin``, while every other tag keeps running this installation.

Invariants:
- The cache folder is keyed by the commit and the stamp, so a moved tag is prepared afresh.
- A release counts as prepared only when its ``prepared`` marker exists, written last; a folder
  left by a killed run is removed and redone. A file lock serialises concurrent preparers.
- All functions here block (git, pip); async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re
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
    """The git checkout whose history holds the release's commit."""
    ref: str
    """The release's commit: its full hash, or a tag such as ``v0.1.0``."""
    version: str | None = None
    """The version to stamp the build with (a PEP 440 and SemVer string, e.g. ``0.2.0-dev.1``);
    None keeps the tree's own."""
    cache_root: Path
    """Folder holding prepared releases (``~/.cache/compute-domains/releases``)."""
    python: str = sys.executable
    """Interpreter whose installation pins the dependency versions; it also creates the venv."""
    timeout_s: float = 900.0
    """Bound on each git or pip step, in seconds (pip may download wheels once)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Release:
    """A prepared release."""

    ref: str
    """The commit hash or tag it was built from."""
    commit: str
    """The commit."""
    version: str
    """The chart's ``appVersion``: the image tag its chart deploys by default."""
    root: Path
    """``<cache>/<commit>[-<stamp>]``: ``src`` (the commit's tree) and ``venv`` live there."""

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


def resolve(repo: Path, ref: str) -> str:
    """The commit ``ref`` (a hash or a tag) names; a clear error when the clone lacks it."""
    res = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if res.returncode == 0:
        return res.stdout.strip()
    if re.fullmatch(r"[0-9a-f]{7,40}", ref):
        raise errors.SimError(
            f"commit {ref} is not in {repo}: the upgrade test builds the previous release from "
            f"it. A full clone of the project has it; in a shallow checkout run "
            f"`git fetch --unshallow` (see docs/upgrade.md, 'Releases')"
        )
    raise errors.SimError(
        f"git tag {ref} is not in {repo}: the upgrade test installs that release. A full "
        f"clone copies tags; in a shallow or tag-less checkout run `git fetch --tags` "
        f"(see docs/upgrade.md, 'Releases')"
    )


_STAMPS = (
    (Path("pyproject.toml"), re.compile(r'^version = ".*"$', re.M), 'version = "{}"'),
    (
        Path("src/compute_domains/__init__.py"),
        re.compile(r'^__version__ = ".*"$', re.M),
        '__version__ = "{}"',
    ),
    (CHART_PATH / "Chart.yaml", re.compile(r"^version: .*$", re.M), "version: {}"),
    (CHART_PATH / "Chart.yaml", re.compile(r"^appVersion: .*$", re.M), 'appVersion: "{}"'),
)


def stamp(src: Path, version: str) -> None:
    """Write ``version`` into the tree's four version strings (each must be there once)."""
    for rel, pattern, line in _STAMPS:
        path = src / rel
        text = path.read_text() if path.is_file() else ""
        if len(pattern.findall(text)) != 1:
            raise errors.SimError(f"cannot stamp {rel}: no single line matching {pattern.pattern}")
        path.write_text(pattern.sub(line.format(version), text))


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
    if settings.version is not None:
        stamp(src, settings.version)
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
        f"pip install of release {settings.ref}",
    )


def _version(chart: Path) -> str:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    return str(meta["appVersion"])


def prepare(settings: ReleaseSettings) -> Release:
    """Install the release into the cache unless it is there already; return it.

    Raises:
        SimError: the commit or tag is missing, the tree cannot be stamped, or git, venv or pip
            failed (the message has their output).
    """
    commit = resolve(settings.repo, settings.ref)
    suffix = f"-{settings.version}" if settings.version is not None else ""
    root = settings.cache_root / f"{commit[:12]}{suffix}"
    settings.cache_root.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(
        settings.cache_root / f".{root.name}.lock",
        timeout=settings.timeout_s * 2,
        owner=f"prepare {settings.ref}",
    )
    with lock:
        if not (root / _MARKER).exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            logger.info("installing release %s (%s) into %s", settings.ref, commit[:12], root)
            _install(settings, commit, root)
            (root / _MARKER).write_text(json.dumps({"ref": settings.ref, "commit": commit}))
    release = Release(ref=settings.ref, commit=commit, version="", root=root)
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
