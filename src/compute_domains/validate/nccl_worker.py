"""One rank of the ``validate nccl`` all-reduce benchmark (PyTorch + NCCL, one process per GPU).

Run as ``python -m compute_domains.validate.nccl_worker --rank R --world N --init URL --sizes
B1,B2,... --out FILE``. Each size: fill with ``rank + 1`` and check that one all-reduce gives
``N(N+1)/2`` everywhere, then ``warmup`` untimed and ``iters`` timed in-place float32 sum
all-reduces, wall-clock between two device synchronisations (as nccl-tests times). The slowest
rank's time and the AND of every rank's correctness are agreed through NCCL; rank 0 writes
``{"world", "torch", "nccl", "device", "results": [{"size", "time_us", "correct"}]}`` to FILE.
NVLink multicast stays off: the parent sets ``NCCL_NVLS_ENABLE=0`` in this process's environment.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def _bench(torch: Any, dist: Any, rank: int, world: int, args: argparse.Namespace) -> list[Any]:
    sizes = [int(s) for s in args.sizes.split(",")]
    buf = torch.empty(max(sizes) // 4, dtype=torch.float32, device=f"cuda:{rank}")
    expected = world * (world + 1) / 2
    out = []
    for size in sizes:
        t = buf[: size // 4]
        t.fill_(float(rank + 1))
        dist.all_reduce(t)
        correct = bool(torch.all(t == expected).item())
        t.zero_()
        for _ in range(args.warmup):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dist.barrier(device_ids=[rank])
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        us = (time.perf_counter() - start) * 1e6 / args.iters
        agreed = torch.tensor([us, 1.0 if correct else 0.0], device=f"cuda:{rank}")
        slowest = agreed[:1].clone()
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        ok = agreed[1:].clone()
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        out.append({"size": size, "time_us": float(slowest.item()), "correct": ok.item() == 1.0})
    return out


def main(argv: list[str]) -> int:
    """Run one rank; rank 0 writes the results file."""
    parser = argparse.ArgumentParser(prog="nccl_worker")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--init", required=True, help="torch.distributed init URL (tcp://...)")
    parser.add_argument("--sizes", required=True, help="comma-separated message sizes in bytes")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import torch  # type: ignore[import-not-found,unused-ignore]
    import torch.distributed as dist  # type: ignore[import-not-found,unused-ignore]

    torch.cuda.set_device(args.rank)
    dist.init_process_group(
        "nccl",
        init_method=args.init,
        rank=args.rank,
        world_size=args.world,
        device_id=torch.device(f"cuda:{args.rank}"),
    )
    try:
        results = _bench(torch, dist, args.rank, args.world, args)
    finally:
        dist.destroy_process_group()
    if args.rank == 0:
        doc = {
            "world": args.world,
            "torch": str(torch.__version__),
            "nccl": ".".join(str(v) for v in torch.cuda.nccl.version()),
            "device": torch.cuda.get_device_name(args.rank),
            "results": results,
        }
        args.out.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
