"""Compile the mock NVML library (``mocknvml.c``, package data) into a folder.

``build_library`` writes ``<out_dir>/libnvidia-ml.so.1``; pointing a process's
``LD_LIBRARY_PATH`` at ``out_dir`` makes nvidia-ml-py load it. Beside it goes
``libcuda.so.1``, an empty placeholder with libcuda's own soname: a node's driver root carries
it because CDI generators locate the driver's library folder (and derive soname links) by it;
no simulated program calls CUDA. A build is reused while the
stamp beside it matches the SHA-256 of the source, the compiler name and the flags, so
repeated calls are cheap. The compiler writes into a private temporary folder and the result
is renamed into place, so a concurrent or interrupted build never leaves a half-written
library under the real name. It is a blocking call: async callers run it in a thread.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from compute_domains.sim import errors
from compute_domains.sim.nvml import config

SOURCE_NAME = "mocknvml.c"
LIBCUDA_NAME = "libcuda.so.1"
"""The soname of the libcuda placeholder built beside the mock."""
_LIBCUDA_SOURCE = b"/* libcuda placeholder of a simulated driver root: no symbols. */\n"
"""The C source inside this package."""
CFLAGS = ("-shared", "-fPIC", "-O2", "-Wall", "-Werror")
"""Compiler flags; the soname flag is added separately."""
_STAMP_SUFFIX = ".sha256"
_TIMEOUT_S = 120.0
_TAIL = 4000


def source_text() -> bytes:
    """The C source shipped as package data."""
    return resources.files(__package__).joinpath(SOURCE_NAME).read_bytes()


def build_library(out_dir: Path, cc: str = "gcc") -> Path:
    """Compile the mock into ``out_dir`` (created if needed) and return the library's path.

    Raises ``ToolBuildError(tool="mocknvml", step="compile")`` when the compiler is missing,
    fails or hangs.
    """
    source = source_text()
    digest = hashlib.sha256(
        b"\0".join([source, cc.encode(), " ".join(CFLAGS).encode()])
    ).hexdigest()
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / config.LIBRARY_NAME
    stamp = out_dir / (config.LIBRARY_NAME + _STAMP_SUFFIX)
    if library.is_file() and (out_dir / LIBCUDA_NAME).is_file() and _read(stamp) == digest:
        return library
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".mocknvml-build.") as tmp:
        src = Path(tmp) / SOURCE_NAME
        src.write_bytes(source)
        built = Path(tmp) / config.LIBRARY_NAME
        argv = [cc, *CFLAGS, "-o", str(built), f"-Wl,-soname,{config.LIBRARY_NAME}", str(src)]
        _compile(argv)
        cuda_src = Path(tmp) / "libcuda.c"
        cuda_src.write_bytes(_LIBCUDA_SOURCE)
        cuda = Path(tmp) / LIBCUDA_NAME
        _compile([cc, *CFLAGS, "-o", str(cuda), f"-Wl,-soname,{LIBCUDA_NAME}", str(cuda_src)])
        os.replace(cuda, out_dir / LIBCUDA_NAME)
        os.replace(built, library)
    stamp.write_text(digest)
    return library


def _compile(argv: list[str]) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except FileNotFoundError as err:
        raise _failure(f"compiler {argv[0]!r} not found") from err
    except subprocess.TimeoutExpired as err:
        raise _failure(f"{argv[0]} did not finish within {_TIMEOUT_S:.0f}s") from err
    if proc.returncode != 0:
        output = (proc.stdout + proc.stderr).strip()[-_TAIL:]
        raise _failure(f"{' '.join(argv)}\nexited with {proc.returncode}:\n{output}")


def _failure(detail: str) -> errors.ToolBuildError:
    return errors.ToolBuildError(tool="mocknvml", step="compile", detail=detail)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
