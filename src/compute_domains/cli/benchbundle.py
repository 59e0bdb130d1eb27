"""``cdctl bench bundle``: write a self-contained bench bundle for a machine without network.

The packing is ``bench/bundle.py``; this command gathers its inputs (this checkout, the runtime
requirements from ``pyproject.toml``, the built tools) and reports the parts it wrote.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import time
import tomllib
from importlib import metadata
from pathlib import Path

import click
from rich.console import Console

from compute_domains.bench import bundle, bundle_run
from compute_domains.cli import options, tools
from compute_domains.sim import toolchain

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
_UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "KB": 1000, "MB": 10**6}


def parse_size(text: str) -> int:
    """``60MiB`` → bytes; plain numbers are bytes. Raises ``click.BadParameter`` otherwise."""
    stripped = text.strip().upper()
    digits = stripped.rstrip("KMGIB")
    unit = stripped[len(digits) :]
    if not digits.isdigit() or unit not in _UNITS:
        raise click.BadParameter(f"{text!r} is not a size such as 60MiB, 500KiB or 1000000")
    return int(digits) * _UNITS[unit]


def _requirements(repo: Path) -> list[str]:
    """The runtime dependencies at the versions installed here, so the bundle measures the same
    stack as this checkout's venv; a dependency not installed here keeps pyproject's range."""
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    pinned: dict[str, str] = {}
    todo = [str(r) for r in project["dependencies"]]
    while todo:
        spec = todo.pop()
        if ";" in spec and "extra ==" in spec.split(";", 1)[1]:
            continue
        name = _NAME.match(spec)
        if name is None:
            continue
        key = re.sub(r"[-_.]+", "-", name.group(0).lower())
        if key in pinned:
            continue
        try:
            dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            pinned[key] = spec
            continue
        pinned[key] = f"{key}=={dist.version}"
        todo.extend(dist.requires or ())
    return sorted(pinned.values())


@click.command("bundle")
@click.option(
    "--out", "out", type=click.Path(path_type=Path), required=True, help="Folder for the parts."
)
@click.option(
    "--python", "python", default="3.12", show_default=True, help="Target Python version."
)
@click.option(
    "--platform",
    "platforms",
    multiple=True,
    default=("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"),
    show_default=True,
    help="pip platform tags of the target, best first (repeat the option).",
)
@click.option("--part-size", default="60MiB", show_default=True, help="Largest part written.")
@click.option(
    "--xz-level",
    type=click.Choice([f"{n}{e}" for n in range(10) for e in ("", "e")]),
    default="9e",
    show_default=True,
    help="xz preset for the tools (6 is about 3 times faster, a few per cent larger).",
)
@click.option(
    "--no-tools", is_flag=True, help="Leave the upstream tools out (for a machine that has them)."
)
def bundle_cmd(
    out: Path,
    python: str,
    platforms: tuple[str, ...],
    part_size: str,
    xz_level: str,
    no_tools: bool,
) -> None:
    """Source, wheels for the target Python, the built tools (xz) and a manifest, in parts.

    On the target: unpack every part into one folder (any order), then
    ``python3 run.py --scratch DIR --results DIR -- bench formation ...``.
    """
    console = Console(stderr=True)
    size = parse_size(part_size)
    repo = options.repo_root()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cd-bundle-") as tmp:
        staging = Path(tmp)
        try:
            with console.status("source (tracked files)..."):
                commit = bundle.write_source(repo, staging / "source.tar.xz")
            requirements = _requirements(repo)
            (staging / "requirements.txt").write_text("\n".join(requirements) + "\n")
            with console.status(f"wheels for Python {python} ({', '.join(platforms)})..."):
                (staging / "wheels").mkdir()
                target = bundle.Target(python=python, platforms=platforms)
                pip = str(Path(sys.executable).parent / "pip")
                bundle.download_wheels(requirements, target, staging / "wheels", pip)
            if not no_tools:
                _pack_tools(console, staging / "tools", xz_level)
            shutil.copy(Path(bundle_run.__file__), staging / bundle.RUN_SCRIPT)
            manifest: dict[str, object] = {
                "bundle_id": f"{commit[:12]}-{time.strftime('%Y%m%d-%H%M%S')}",
                "commit": commit,
                "target": {"python": python, "platforms": list(platforms)},
                "tools": not no_tools,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            parts = bundle.write_parts(staging, out, size, manifest)
        except bundle.BundleError as exc:
            raise click.ClickException(str(exc)) from exc
    total = sum(p.stat().st_size for p in parts)
    console.print(
        f"bundle of commit {commit[:12]} in {len(parts)} part(s), {total / (1 << 20):.1f} MiB, "
        f"in {time.monotonic() - started:.0f}s: {out}"
    )
    for part in parts:
        click.echo(f"{part}  {part.stat().st_size / (1 << 20):.1f} MiB")


def _pack_tools(console: Console, dest: Path, level: str) -> None:
    """Every built tool as ``tools/<tool>/bin/<name>.xz`` plus its ``manifest.json``."""
    toolset = tools.build_tools(console)
    for spec in toolchain.TOOLS:
        src = toolset.root / spec.name
        (dest / spec.name / "bin").mkdir(parents=True)
        shutil.copy(src / "manifest.json", dest / spec.name / "manifest.json")
        for out in spec.outputs:
            with console.status(f"compressing {out} (xz -{level})..."):
                bundle.compress(src / "bin" / out, dest / spec.name / "bin" / f"{out}.xz", level)
