"""A stand-in for ``nccl_worker``: rank 0 writes plausible results; ``--fail`` exits 7."""

import argparse
import json
import os
import sys
from pathlib import Path

parser = argparse.ArgumentParser()
for flag in ("--rank", "--world", "--warmup", "--iters"):
    parser.add_argument(flag, type=int)
parser.add_argument("--init")
parser.add_argument("--sizes")
parser.add_argument("--out", type=Path)
parser.add_argument("--fail", action="store_true")
args = parser.parse_args()
if args.fail:
    print("worker boom", flush=True)
    sys.exit(7)
if args.rank == 0:
    sizes = [int(s) for s in args.sizes.split(",")]
    doc = {
        "world": args.world,
        "nvls": os.environ.get("NCCL_NVLS_ENABLE"),
        "init": args.init,
        "results": [{"size": s, "time_us": s / 400e3, "correct": True} for s in sizes],
    }
    args.out.write_text(json.dumps(doc))
