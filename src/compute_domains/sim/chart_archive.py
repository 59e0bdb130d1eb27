"""Package the project's Helm chart into the versioned archive a user pins (``make chart``).

The built ``helm`` lints the chart folder, then ``helm package`` writes
``<out>/<name>-<version>.tgz`` with the name and version of its ``Chart.yaml``; that archive
installs with ``helm install <release> ./<name>-<version>.tgz`` as the folder does. It lives
beside the tool build because it runs the pinned helm, stamped with the Kubernetes version it
assumes, so ``helm lint`` needs no ``--kube-version``.

Invariants:
- An archive is returned only after it was read back: its ``Chart.yaml`` has the folder's name
  and version, and its ``crds/`` holds every CRD file of the folder's ``crds/``, byte for byte
  (helm installs CRDs only from there; a ``.helmignore`` that drops one would ship a chart that
  installs without its CRD).
- Nothing is left at the archive's path when a check fails.
- Blocking (helm subprocesses, tar reads); async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import dataclasses
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import yaml

from compute_domains.sim import errors


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ChartSettings:
    """Which chart to package and where the archive goes."""

    chart: Path
    """The chart folder (``deploy/helm/compute-domains``)."""
    out: Path
    """Folder the archive is written into (``build/`` for ``make chart``); made if missing."""
    lint_namespace: str = "compute-domains"
    """Namespace ``helm lint`` renders for (the chart refuses ``default``)."""
    timeout_s: float = 60.0
    """Bound on each helm step, in seconds (both take well under one)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ChartArchive:
    """A packaged chart, as read back from the archive."""

    path: Path
    name: str
    version: str
    app_version: str
    crds: tuple[str, ...]
    """File names under the archive's ``<name>/crds/``, sorted."""


def chart_meta(chart: Path) -> dict[str, Any]:
    """The folder's ``Chart.yaml``; a missing or unreadable one is a clear error."""
    path = chart / "Chart.yaml"
    try:
        meta = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise errors.SimError(f"cannot read the chart's metadata {path}: {err}") from err
    if not isinstance(meta, dict) or not meta.get("name") or not meta.get("version"):
        raise errors.SimError(f"{path} has no name or version; helm cannot package it")
    return meta


def package(settings: ChartSettings, helm: Path) -> ChartArchive:
    """Lint, package and verify the chart; return the archive read back."""
    meta = chart_meta(settings.chart)
    crd_dir = settings.chart / "crds"
    crds = {p.name: p.read_bytes() for p in sorted(crd_dir.glob("*.yaml"))}
    if not crds:
        raise errors.SimError(f"{crd_dir} holds no CRD (*.yaml); the archive would install none")
    # A namespace of its own: in ``default`` the chart refuses to render, which lint would only
    # report as INFO.
    _helm(
        helm,
        "lint",
        settings.chart,
        "--strict",
        "--namespace",
        settings.lint_namespace,
        timeout_s=settings.timeout_s,
    )
    settings.out.mkdir(parents=True, exist_ok=True)
    # The file name ``helm package`` gives it.
    path = settings.out / f"{meta['name']}-{meta['version']}.tgz"
    path.unlink(missing_ok=True)
    _helm(
        helm, "package", settings.chart, "--destination", settings.out, timeout_s=settings.timeout_s
    )
    try:
        return _check(path, meta, crds)
    except errors.SimError:
        path.unlink(missing_ok=True)
        raise


def read(path: Path) -> ChartArchive:
    """The name, versions and CRD file names of a packaged chart."""
    return _archive(path, *_contents(path))


def _archive(path: Path, meta: dict[str, Any], crds: dict[str, bytes]) -> ChartArchive:
    return ChartArchive(
        path=path,
        name=str(meta.get("name", "")),
        version=str(meta.get("version", "")),
        app_version=str(meta.get("appVersion", "")),
        crds=tuple(sorted(crds)),
    )


def _contents(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The archive's ``Chart.yaml`` and its ``crds/`` files by name."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = {m.name: m for m in tar.getmembers() if m.isfile()}
            charts = [n for n in members if n.count("/") == 1 and n.endswith("/Chart.yaml")]
            if len(charts) != 1:
                raise errors.SimError(f"{path} is not a chart archive: no <name>/Chart.yaml")
            top = charts[0].split("/")[0]
            meta = yaml.safe_load(_member(tar, members[charts[0]]))
            crds = {
                name.removeprefix(f"{top}/crds/"): _member(tar, member)
                for name, member in members.items()
                if name.startswith(f"{top}/crds/")
            }
    except (OSError, tarfile.TarError, yaml.YAMLError) as err:
        raise errors.SimError(f"cannot read the chart archive {path}: {err}") from err
    if not isinstance(meta, dict):
        raise errors.SimError(f"{path}: its Chart.yaml is not a mapping")
    return meta, crds


def _member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    fh = tar.extractfile(member)
    if fh is None:
        raise errors.SimError(f"{member.name} in the chart archive is not a file")
    return fh.read()


def _check(path: Path, meta: dict[str, Any], crds: dict[str, bytes]) -> ChartArchive:
    """The archive at ``path`` read back, when it is the folder's chart with all its CRDs."""
    packed_meta, packed_crds = _contents(path)
    archive = _archive(path, packed_meta, packed_crds)
    want = (str(meta["name"]), str(meta["version"]))
    if (archive.name, archive.version) != want:
        raise errors.SimError(
            f"{path} holds chart {archive.name} {archive.version}, not {want[0]} {want[1]}"
        )
    missing = sorted(set(crds) - set(packed_crds))
    if missing:
        raise errors.SimError(
            f"{path} lacks the CRDs {', '.join(missing)} under crds/ (a .helmignore "
            "entry?); helm would install the chart without them"
        )
    changed = [n for n in sorted(crds) if packed_crds[n] != crds[n]]
    if changed:
        raise errors.SimError(f"{path} holds other bytes for crds/{', '.join(changed)}")
    return archive


def _helm(helm: Path, verb: str, *args: str | Path, timeout_s: float) -> str:
    argv = [str(helm), verb, *map(str, args)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise errors.SimError(f"helm {verb} could not run: {err}") from err
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()
        raise errors.SimError(f"helm {verb} {args[0]} failed:\n{output[-2000:]}")
    return done.stdout
