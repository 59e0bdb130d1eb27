"""The bench bundle's ``run.py``: install a bundle into a scratch folder and run one bench there.

Shipped inside every part of a bundle (``cdctl bench bundle``) and run by the target machine's
own Python, before anything of the project is installed, so it uses the standard library only
and never imports ``compute_domains``. Usage, from the folder every part was unpacked into::

    python3 run.py --scratch /tmp/cd --results /tmp/out -- bench formation --sizes 72 ...

Steps, each idempotent (a second run reuses what the first installed):
1. check the bundle: every file of the manifest present (chunks joined), its SHA-256 matching;
   a missing part is named, nothing is installed from an incomplete bundle;
2. unpack the source into ``SCRATCH/src``, make ``SCRATCH/venv`` with this Python, install the
   carried wheels offline (``pip --no-index``), put the source on the venv's path (a ``.pth``
   file) and a ``cdctl`` launcher into its ``bin``;
3. decompress the carried upstream tools into ``SCRATCH/tools`` (each tool's folder with its
   manifest), which ``cdctl`` takes as a prebuilt tool cache through ``CD_TOOLS_DIR``: no Go;
4. run ``cdctl ARGS`` with the sim's state under ``SCRATCH`` and copy every result file it wrote
   under ``bench/results/`` (and the PNG pictures beside them) to ``--results``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check(bundle: Path) -> dict[str, Any]:
    """Join chunks and verify every file; exit with the list of what is missing or corrupt."""
    manifest: dict[str, Any] = json.loads((bundle / "manifest.json").read_text())
    missing: list[str] = []
    for entry in manifest["files"]:
        path = bundle / entry["path"]
        chunks = [bundle / c for c in entry["chunks"]]
        if chunks and all(c.is_file() for c in chunks):
            with path.open("wb") as out:
                for c in chunks:
                    with c.open("rb") as inp:
                        shutil.copyfileobj(inp, out, 1 << 20)
            for c in chunks:
                c.unlink()
        if not path.is_file():
            absent = [c.name for c in chunks if not c.is_file()]
            missing.append(
                f"{entry['path']} (absent{': chunks ' + ', '.join(absent) if absent else ''})"
            )
        elif path.stat().st_size != entry["size"] or _sha256(path) != entry["sha256"]:
            missing.append(f"{entry['path']} (checksum mismatch)")
    if missing:
        sys.exit(
            f"bundle incomplete: {len(missing)} of {len(manifest['files'])} files not usable "
            f"(the bundle has {manifest['parts']} parts; unpack all of them here): "
            + "; ".join(missing[:10])
        )
    return manifest


def install(bundle: Path, scratch: Path, manifest: dict[str, Any]) -> Path:
    """Source, venv, wheels and tools under ``scratch``; returns the venv's Python."""
    stamp = scratch / ".installed"
    venv = scratch / "venv"
    python = venv / "bin" / "python"
    if stamp.is_file() and stamp.read_text() == manifest["bundle_id"]:
        return python
    scratch.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(scratch / "src", ignore_errors=True)
    with tarfile.open(bundle / "source.tar.xz") as tar:
        tar.extractall(scratch, filter="tar")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--find-links",
            str(bundle / "wheels"),
            "-r",
            str(bundle / "requirements.txt"),
        ],
        check=True,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "compute_domains_bundle.pth").write_text(str(scratch / "src" / "src") + "\n")
    launcher = venv / "bin" / "cdctl"
    launcher.write_text(f"#!{python}\nfrom compute_domains.cli.entry import main\nmain()\n")
    launcher.chmod(0o755)
    tools = scratch / "tools"
    shutil.rmtree(tools, ignore_errors=True)
    for packed in sorted((bundle / "tools").rglob("*")):
        rel = packed.relative_to(bundle / "tools")
        if not packed.is_file():
            continue
        if packed.suffix == ".xz":
            dest = tools / rel.with_suffix("")
            dest.parent.mkdir(parents=True, exist_ok=True)
            with lzma.open(packed) as inp, dest.open("wb") as out:
                shutil.copyfileobj(inp, out, 1 << 20)
            dest.chmod(0o755)
        else:
            dest = tools / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(packed, dest)
    stamp.write_text(str(manifest["bundle_id"]))
    return python


def main() -> None:
    """Check, install, run, copy the results (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scratch", type=Path, required=True, help="install and sim state here")
    parser.add_argument("--results", type=Path, required=True, help="copy result files here")
    parser.add_argument("--check-only", action="store_true", help="verify the bundle and stop")
    parser.add_argument("cdctl_args", nargs="*", help="arguments for cdctl (after --)")
    args = parser.parse_args()
    manifest = check(HERE)
    print(
        f"bundle {manifest['bundle_id']} complete: {len(manifest['files'])} files, "
        f"commit {manifest['commit']}, for Python {manifest['target']['python']}"
    )
    if args.check_only:
        return
    scratch = args.scratch.resolve()
    python = install(HERE, scratch, manifest)
    results = scratch / "src" / "bench" / "results"
    before = {p.name for p in results.glob("*")} if results.is_dir() else set()
    env = dict(os.environ)
    env.update(
        CD_TOOLS_DIR=str(scratch / "tools"),
        CD_SIM_HOME=str(scratch / "sim"),
        XDG_CACHE_HOME=str(scratch / "cache"),
        PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
    )
    code = 0
    if args.cdctl_args:
        cmd = [str(python.parent / "cdctl"), *args.cdctl_args]
        print("running:", " ".join(cmd), flush=True)
        code = subprocess.run(cmd, env=env, check=False).returncode
    args.results.mkdir(parents=True, exist_ok=True)
    copied = 0
    for path in sorted(results.glob("*")) if results.is_dir() else []:
        if path.name not in before and path.is_file():
            shutil.copy2(path, args.results / path.name)
            copied += 1
    print(
        f"cdctl exited {code}; {copied} result file(s) copied to {args.results}"
        f" (Python {sysconfig.get_python_version()})"
    )
    sys.exit(code)


if __name__ == "__main__":
    main()
