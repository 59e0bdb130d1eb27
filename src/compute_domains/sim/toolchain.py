"""Build the upstream tools the simulator runs, from their pinned Go modules, into a cache.

Each tool lives in its own small Go module under the repository's ``tools/`` folder (their
dependency pins conflict, so they cannot share one ``go.mod``). The cache folder is keyed by a
hash of every pin (``go.mod``/``go.sum``, build flags, the Go version), so a changed pin builds
into a fresh folder and an unchanged one is reused. A tool counts as built only when its
manifest lists every output with a matching SHA-256; anything else (a half-written folder from
a killed build, a truncated binary) is rebuilt. Go is only the toolchain here: nothing of the
project's own logic is written in Go.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from compute_domains.infra import errors, filelock
from compute_domains.sim import errors as sim_errors

KUBERNETES_VERSION = "v1.34.4"
HELM_VERSION = "v3.19.0"
HELM_COMMIT = "3d8990f0836691f0229297773f3524598f46bda6"
"""The commit helm's ``HELM_VERSION`` tag names (the Go proxy's ``.info`` ``Origin.Hash``)."""
HELM_CLIENT_GO = "v0.34.0"
"""The ``k8s.io/client-go`` in ``tools/helm/go.mod``; helm's Makefile turns it into the Kubernetes
version ``helm template`` and ``helm lint`` assume without ``--kube-version`` (v0.34 → 1.34)."""
ETCD_VERSION = "v3.6.6"

_BUILD_LOCK_TIMEOUT = 3600.0
"""Seconds a build waits for another build of the same pins (a cold build takes ~15 min)."""

_K8S_LDFLAGS = " ".join(
    [
        "-s -w",
        f"-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION}",
        "-X k8s.io/component-base/version.gitMajor=1",
        "-X k8s.io/component-base/version.gitMinor=34",
        "-X k8s.io/component-base/version.gitTreeState=clean",
        f"-X k8s.io/client-go/pkg/version.gitVersion={KUBERNETES_VERSION}",
        "-X k8s.io/client-go/pkg/version.gitMajor=1",
        "-X k8s.io/client-go/pkg/version.gitMinor=34",
    ]
)


def _helm_ldflags() -> str:
    # Helm's own Makefile stamps these; without the kube version stamps helm falls back to
    # v1.20, and our chart (kubeVersion >=1.32) fails ``helm template`` unless given
    # ``--kube-version``. Major is client-go's 0 plus 1, as the Makefile computes it.
    _, minor, _ = HELM_CLIENT_GO.removeprefix("v").split(".")
    flags = ["-s -w"]
    for var, value in (
        ("internal/version.version", HELM_VERSION),
        ("internal/version.gitCommit", HELM_COMMIT),
        ("internal/version.gitTreeState", "clean"),
        ("pkg/chartutil.k8sVersionMajor", "1"),
        ("pkg/chartutil.k8sVersionMinor", minor),
        ("pkg/lint/rules.k8sVersionMajor", "1"),
        ("pkg/lint/rules.k8sVersionMinor", minor),
    ):
        flags.append(f"-X helm.sh/helm/v3/{var}={value}")
    return " ".join(flags)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolSpec:
    """One Go module under ``tools/`` and the commands built from it."""

    name: str
    """Folder name under ``tools/`` and under the cache."""
    packages: tuple[str, ...]
    """Go import paths of the ``main`` packages to build."""
    outputs: tuple[str, ...]
    """File names produced in the tool's ``bin`` folder, one per package, same order."""
    ldflags: str = "-s -w"
    """Linker flags; version stamps go here so ``--version`` answers truthfully."""


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="etcd",
        packages=("go.etcd.io/etcd/server/v3",),
        outputs=("etcd",),
    ),
    ToolSpec(
        name="kubernetes",
        packages=(
            "k8s.io/kubernetes/cmd/kube-apiserver",
            "k8s.io/kubernetes/cmd/kube-controller-manager",
            "k8s.io/kubernetes/cmd/kube-scheduler",
            "k8s.io/kubernetes/cmd/kubectl",
        ),
        outputs=("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
        ldflags=_K8S_LDFLAGS,
    ),
    ToolSpec(
        name="helm",
        packages=("helm.sh/helm/v3/cmd/helm",),
        outputs=("helm",),
        ldflags=_helm_ldflags(),
    ),
)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolchainSettings:
    """Where the tool sources are and where built tools go."""

    tools_src: Path
    """The repository's ``tools/`` folder (one Go module per tool)."""
    cache_root: Path
    """``$XDG_CACHE_HOME/compute-domains/tools``; a pin-hash folder is made inside."""
    go: str = "go"
    """The Go command; only a toolchain, never a runtime dependency."""
    tools: tuple[ToolSpec, ...] = TOOLS
    """What to build (tests pass their own)."""
    prebuilt: Path | None = None
    """A tool cache carried from another machine (a bench bundle's ``tools/``): one folder per
    tool with its ``bin/`` and ``manifest.json``. When set, nothing is built and Go is not
    needed; every tool must be there with matching checksums, or the start fails naming it."""


@dataclasses.dataclass(frozen=True, slots=True)
class Progress:
    """One progress report: which tool, which step, and how far (``done``/``total`` packages)."""

    tool: str
    step: str
    done: int
    total: int


ProgressFn = Callable[[Progress], None]


@dataclasses.dataclass(frozen=True, slots=True)
class Toolset:
    """Paths of the built tools."""

    root: Path

    @property
    def bin_dir(self) -> Path:
        """Folder holding every built executable (put it first on ``PATH``)."""
        return self.root / "bin"

    def path(self, name: str) -> Path:
        """Absolute path of one built executable."""
        return self.bin_dir / name


async def _go_version(go: str) -> str:
    if shutil.which(go) is None:
        raise errors.ConfigError(
            f"Go toolchain not found: '{go}' is not on PATH. Install Go >= 1.24 "
            "(it only builds the pinned upstream tools) and run again."
        )
    out = await _run([go, "version"], cwd=None, tool="go", step="version")
    return out.strip()


def pin_hash(settings: ToolchainSettings, go_version: str) -> str:
    """Hash every input that decides the built bytes; a different pin gets a new folder."""
    digest = hashlib.sha256(go_version.encode())
    for spec in settings.tools:
        digest.update(repr(dataclasses.astuple(spec)).encode())
        for fname in ("go.mod", "go.sum"):
            path = settings.tools_src / spec.name / fname
            digest.update(fname.encode())
            digest.update(path.read_bytes() if path.exists() else b"<missing>")
    return digest.hexdigest()[:16]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _manifest_ok(tool_dir: Path, spec: ToolSpec) -> bool:
    manifest = tool_dir / "manifest.json"
    try:
        recorded = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return False
    for out in spec.outputs:
        path = tool_dir / "bin" / out
        if not path.is_file() or recorded.get(out) != _sha256(path):
            return False
    return True


async def _run(
    argv: Sequence[str],
    *,
    cwd: Path | None,
    tool: str,
    step: str,
    env: dict[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> str:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    async for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        lines.append(line)
        if on_line is not None:
            on_line(line)
    rc = await proc.wait()
    if rc != 0:
        tail = "\n".join(lines[-15:])
        raise sim_errors.ToolBuildError(tool=tool, step=step, detail=tail or f"exit code {rc}")
    return "\n".join(lines)


async def _build_tool(
    spec: ToolSpec, settings: ToolchainSettings, dest: Path, progress: ProgressFn
) -> None:
    src = settings.tools_src / spec.name
    if not (src / "go.mod").is_file():
        raise sim_errors.ToolBuildError(
            tool=spec.name, step="source", detail=f"{src / 'go.mod'} is missing"
        )
    progress(Progress(spec.name, "download", 0, 1))
    await _run([settings.go, "mod", "download"], cwd=src, tool=spec.name, step="download")
    deps = await _run(
        [settings.go, "list", "-deps", *spec.packages], cwd=src, tool=spec.name, step="list"
    )
    total = len(deps.splitlines())
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "bin").mkdir(parents=True)
    done = 0

    def on_line(line: str) -> None:
        nonlocal done
        if line and not line.startswith(("#", " ")):
            done = min(done + 1, total)
            progress(Progress(spec.name, "build", done, total))

    progress(Progress(spec.name, "build", 0, total))
    for pkg, out in zip(spec.packages, spec.outputs, strict=True):
        await _run(
            [
                settings.go,
                "build",
                "-v",
                "-trimpath",
                "-ldflags",
                spec.ldflags,
                "-o",
                str(staging / "bin" / out),
                pkg,
            ],
            cwd=src,
            tool=spec.name,
            step=f"build {out}",
            on_line=on_line,
        )
    manifest = {out: _sha256(staging / "bin" / out) for out in spec.outputs}
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    progress(Progress(spec.name, "done", total, total))


async def ensure_built(
    settings: ToolchainSettings,
    progress: ProgressFn | None = None,
) -> tuple[Toolset, dict[str, float]]:
    """Build whatever is missing or corrupt; return the toolset and seconds spent per tool.

    A tool already in the cache with a valid manifest costs only its checksum.
    """
    report = progress or (lambda _p: None)
    if settings.prebuilt is not None:
        return _use_prebuilt(settings.prebuilt, settings.tools, report), {}
    go_version = await _go_version(settings.go)
    root = settings.cache_root / pin_hash(settings, go_version)
    timings: dict[str, float] = {}
    root.mkdir(parents=True, exist_ok=True)
    # Two builds at once (two checkouts, two terminals) would share each tool's ``.partial``
    # staging folder and rename it under each other; the second waits and then finds the
    # first one's tools cached.
    lock = filelock.FileLock(
        root.parent / f"{root.name}.lock", timeout=_BUILD_LOCK_TIMEOUT, owner="cdctl tools build"
    )
    async with lock:
        for spec in settings.tools:
            tool_dir = root / spec.name
            start = time.monotonic()
            if _manifest_ok(tool_dir, spec):
                report(Progress(spec.name, "cached", 1, 1))
            else:
                await _build_tool(spec, settings, tool_dir, report)
            timings[spec.name] = time.monotonic() - start
        _link_bin(root, settings.tools)
    return Toolset(root), timings


def _use_prebuilt(root: Path, tools: tuple[ToolSpec, ...], report: ProgressFn) -> Toolset:
    """The carried tool cache at ``root``, checked tool by tool; never builds."""
    bad = [spec.name for spec in tools if not _manifest_ok(root / spec.name, spec)]
    if bad:
        raise errors.ConfigError(
            f"prebuilt tools at {root}: {', '.join(bad)} missing or not matching its "
            "manifest.json (a partial or corrupt copy); unpack the whole tool cache again, or "
            "unset CD_TOOLS_DIR to build the tools here with Go"
        )
    for spec in tools:
        report(Progress(spec.name, "prebuilt", 1, 1))
    _link_bin(root, tools)
    return Toolset(root)


def _link_bin(root: Path, tools: tuple[ToolSpec, ...]) -> None:
    """Gather every tool's executables in one ``bin`` folder of symlinks."""
    bin_dir = root / "bin"
    bin_dir.mkdir(exist_ok=True)
    for spec in tools:
        for out in spec.outputs:
            link = bin_dir / out
            target = root / spec.name / "bin" / out
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target)
