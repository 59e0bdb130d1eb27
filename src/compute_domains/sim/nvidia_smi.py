"""``nvidia-smi`` stand-in of a simulated node's driver root (``sim.driverroot``).

Answers from NVML, loaded the way the real tool loads it (``libnvidia-ml.so.1`` from the
driver's library folder, here the one beside the program's ``bin``), so it tells the same
story as the node's NVML stand-in: the driver version and one line per GPU (``-L``), or the
real tool's failure text and exit code 9 when NVML cannot be reached.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pynvml  # type: ignore[import-untyped]  # nvidia-ml-py ships no type information


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def main(argv: list[str]) -> int:
    """``--lib-dir DIR`` then the tool's own arguments (``-L``/``--list-gpus``); the exit code
    (0, or 9 without a driver)."""
    if argv[:1] == ["--lib-dir"]:
        library = Path(argv[1]) / "libnvidia-ml.so.1"
        argv = argv[2:]
        if library.exists():
            # Loaded first under its soname, so pynvml's bare-name load gets this driver's
            # library whatever the loader's search path says.
            ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        print(
            f"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. ({err})"
        )
        return 9
    try:
        lines = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(pynvml.nvmlDeviceGetName(handle))
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            lines.append(f"GPU {index}: {name} (UUID: {uuid})")
        if "-L" in argv or "--list-gpus" in argv:
            print("\n".join(lines))
        else:
            version = _text(pynvml.nvmlSystemGetDriverVersion())
            print(f"NVIDIA-SMI {version}    Driver Version: {version}    (simulated node)")
            print("\n".join(lines))
    finally:
        pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
