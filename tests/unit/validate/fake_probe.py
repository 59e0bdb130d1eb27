"""A driver stand-in for ``cuda_probe``: applies the channel rule to the nodes it can see.

Run inside the workload containers by the channel runtime test (no GPU needed). Like the real
driver (shared/hardware/h200.md): no channel node → ``cuMemCreate(FABRIC)`` is refused; an
export is bound to the exporter's lowest channel; an import succeeds only for a holder of that
channel. Channels are identified by the device node's minor number, so the test also proves
the CDI nodes carry the right numbers.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from compute_domains.validate import cuda_probe

NOT_PERMITTED = "CUDA_ERROR_NOT_PERMITTED"


def _minors() -> set[int]:
    folder = cuda_probe.CHANNEL_DIR
    if not folder.is_dir():
        return set()
    return {os.minor(os.stat(p).st_rdev) for p in folder.iterdir()}


def main(argv: list[str]) -> int:
    """``[--ignore-channels] ROLE --exchange DIR ...``: the first flag plays a broken driver."""
    broken = argv[0] == "--ignore-channels"
    argv = argv[1:] if broken else argv
    role, exchange = argv[0], Path(argv[argv.index("--exchange") + 1])
    res = cuda_probe.ProbeResult(role=role, channels=cuda_probe.visible_channels(), device="fake")
    held = set(range(2048)) if broken else _minors()
    if role in ("alloc", "export"):
        res.step = "cuMemCreate"
        if not held:
            res.error = NOT_PERMITTED
            if role == "export":
                cuda_probe.write_json(exchange / cuda_probe.FAILED_FILE, {"error": res.error})
        else:
            res.ok, res.bytes = True, 4096
            if role == "export":
                export = {"handle": bytes([min(held)]).hex(), "size": 4096, "seed": 7}
                cuda_probe.write_json(exchange / cuda_probe.EXPORT_FILE, export)
                while not (exchange / cuda_probe.RELEASE_FILE).exists():
                    time.sleep(0.02)
    else:
        doc = cuda_probe.wait_export(exchange, 30.0)
        assert doc is not None and not doc["failed"]
        res.step = "cuMemImportFromShareableHandle"
        if bytes.fromhex(doc["handle"])[0] in held:
            res.ok, res.bytes, res.matched = True, 4096, True
        else:
            res.error = NOT_PERMITTED
    cuda_probe.emit(res)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
