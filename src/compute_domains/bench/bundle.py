"""A self-contained bench bundle for a bigger machine without network (issue 28).

``cdctl bench bundle --out DIR`` writes everything a machine with only a target Python needs to run
a benchmark of this checkout: the source (the tracked files of ``HEAD``'s tree as it is in the
work tree), the wheels of every runtime dependency for a stated Python version and platform, the
built upstream tools compressed with xz, a manifest with the SHA-256 of every file, and the
stdlib-only ``run.py`` (``bench/bundle_run.py``) that installs into a scratch folder and runs a
bench there.

Parts. The bundle is written as ``part-NNN.tar`` files of at most ``part_size`` bytes each, so it
can cross a transfer limit in pieces. Each part is a plain tar that unpacks alone, in any order,
into the same folder (``tar -xf part-002.tar -C DIR``), and every part carries the manifest and the
run script, so whichever part arrives first can say what is still missing. A file larger than a
part's room is cut into chunks (``<path>.chunk000`` …) that ``run.py`` joins and checks against
the manifest before anything is installed.

This module only plans and packs; it never runs a simulation. Pure where it can be
(``plan_parts``), with the external steps (git, pip, xz) in small functions that say what failed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import lzma
import shutil
import subprocess
import tarfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

MANIFEST = "manifest.json"
"""Name of the manifest inside the bundle folder (and inside every part)."""
RUN_SCRIPT = "run.py"
"""Name of the stdlib-only installer and runner inside the bundle."""
_TAR_OVERHEAD = 3 * 512
"""A tar member costs a 512-byte header and padding; kept free per member when packing."""
_PART_RESERVE = 256 * 1024
"""Room kept in every part for the manifest and the run script."""


class BundleError(Exception):
    """A step of writing the bundle failed; the message says which and why."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """The machine the bundle is for."""

    python: str
    """Python version as ``3.12`` (wheels are chosen for it)."""
    platforms: tuple[str, ...]
    """pip platform tags, best first (e.g. ``manylinux_2_28_x86_64``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    """One file of the bundle, as the manifest records it."""

    path: str
    """Path inside the bundle folder once all parts are unpacked and chunks joined."""
    sha256: str
    size: int
    chunks: tuple[str, ...] = ()
    """Chunk file names when the file was cut; empty when it travels whole."""


def sha256(path: Path) -> str:
    """SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def plan_parts(sizes: dict[str, int], part_size: int) -> list[list[tuple[str, int, int]]]:
    """Assign files (name → size) to parts of at most ``part_size`` bytes (first fit, largest
    first). Returns per part a list of ``(name, offset, length)`` pieces; a file bigger than a
    part's room is cut into pieces that each fill one part. Pure, so it is unit-tested."""
    room = part_size - _PART_RESERVE
    if room <= _TAR_OVERHEAD:
        raise BundleError(f"part size {part_size} B is too small (at least {_PART_RESERVE * 2} B)")
    parts: list[list[tuple[str, int, int]]] = []
    free: list[int] = []
    for name, size in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        offset = 0
        while True:
            length = min(size - offset, room - _TAR_OVERHEAD)
            cut = length < size
            for i, left in enumerate(free):
                if not cut and left >= length + _TAR_OVERHEAD:
                    parts[i].append((name, offset, length))
                    free[i] -= length + _TAR_OVERHEAD
                    break
            else:
                parts.append([(name, offset, length)])
                free.append(room - length - _TAR_OVERHEAD)
            offset += length
            if offset >= size:
                break
    return parts


def _run(argv: Sequence[str], what: str, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise BundleError(f"{what}: cannot run {argv[0]}: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise BundleError(f"{what} failed ({' '.join(argv[:3])} …): " + " / ".join(tail))
    return done.stdout


def write_source(repo: Path, dest: Path) -> str:
    """The tracked files of the work tree as ``dest`` (a .tar.xz); returns the HEAD commit.

    Tracked files as they are now (uncommitted edits included), so a bench of work in progress
    measures what is on disk; the manifest records the commit and whether the tree was clean."""
    commit = _run(["git", "rev-parse", "HEAD"], "reading the commit", repo).strip()
    listing = _run(["git", "ls-files", "-z"], "listing tracked files", repo)
    with tarfile.open(dest, "w:xz", preset=6) as tar:
        for rel in sorted(p for p in listing.split("\0") if p):
            path = repo / rel
            if path.is_file() or path.is_symlink():
                tar.add(path, arcname=f"src/{rel}", recursive=False)
    return commit


def download_wheels(requirements: Iterable[str], target: Target, dest: Path, pip: str) -> None:
    """Binary wheels of ``requirements`` and their dependencies for ``target`` into ``dest``."""
    argv = [pip, "download", "--quiet", "--only-binary=:all:", "--dest", str(dest)]
    argv += ["--python-version", target.python, "--implementation", "cp"]
    for platform in target.platforms:
        argv += ["--platform", platform]
    _run([*argv, *requirements], f"downloading wheels for Python {target.python}")


def compress(src: Path, dest: Path, level: str = "9e") -> None:
    """``src`` as xz at preset ``level`` (``0``-``9``, ``e`` for extreme); the ``xz`` command
    (all cores) when present, else Python's lzma. 9e is the smallest and about 3 times slower
    than 6, which costs a few per cent more bytes on Go binaries."""
    preset = int(level.rstrip("e")) | (lzma.PRESET_EXTREME if level.endswith("e") else 0)
    xz = shutil.which("xz")
    if xz:
        with dest.open("wb") as out, src.open("rb") as inp:
            done = subprocess.run(
                [xz, f"-{level}", "-T0", "-c"], stdin=inp, stdout=out, check=False
            )
        if done.returncode == 0:
            return
    with src.open("rb") as inp, lzma.open(dest, "wb", preset=preset) as out:
        shutil.copyfileobj(inp, out, 1 << 20)


def write_parts(
    staging: Path, out: Path, part_size: int, manifest: dict[str, object]
) -> list[Path]:
    """Pack every file under ``staging`` into ``out/part-NNN.tar``; returns the parts written.

    The manifest (with ``files`` filled in here) and the run script go into every part."""
    files = sorted(
        p
        for p in staging.rglob("*")
        if p.is_file() and p.relative_to(staging).as_posix() not in (MANIFEST, RUN_SCRIPT)
    )
    sizes = {p.relative_to(staging).as_posix(): p.stat().st_size for p in files}
    plan = plan_parts(sizes, part_size)
    entries: dict[str, Entry] = {}
    cuts: dict[str, list[str]] = {}
    for pieces in plan:
        for name, _offset, length in pieces:
            if length < sizes[name]:
                chunks = cuts.setdefault(name, [])
                chunks.append(f"{name}.chunk{len(chunks):03d}")
    for name in sizes:
        entries[name] = Entry(
            path=name,
            sha256=sha256(staging / name),
            size=sizes[name],
            chunks=tuple(cuts.get(name, ())),
        )
    manifest = {
        **manifest,
        "parts": len(plan),
        "files": [dataclasses.asdict(e) for e in entries.values()],
    }
    blob = json.dumps(manifest, indent=1).encode()
    (staging / MANIFEST).write_bytes(blob)
    runner = (staging / RUN_SCRIPT).read_bytes()
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    chunk_seen: dict[str, int] = {}
    for number, pieces in enumerate(plan):
        part = out / f"part-{number:03d}.tar"
        with tarfile.open(part, "w") as tar:
            _add_bytes(tar, MANIFEST, blob)
            _add_bytes(tar, RUN_SCRIPT, runner, mode=0o755)
            for name, offset, length in pieces:
                if length == sizes[name]:
                    tar.add(staging / name, arcname=name)
                    continue
                index = chunk_seen.get(name, 0)
                chunk_seen[name] = index + 1
                with (staging / name).open("rb") as f:
                    f.seek(offset)
                    _add_bytes(tar, cuts[name][index], f.read(length))
        if part.stat().st_size > part_size:
            raise BundleError(f"{part.name} is {part.stat().st_size} B, over {part_size} B")
        written.append(part)
    return written


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = int(time.time())
    tar.addfile(info, io.BytesIO(data))
