#!/usr/bin/env python3
"""What one ComputeDomain status write of N nodes costs the API server (issue 28 point 3).

"Last entry Ready → CD Ready ≤ 1 s" is missed at 2,304 and 4,608 nodes (2.6 to 9.4 s on the
16-core machine) although the controller's own pass takes 0.1 to 0.2 s of CPU there
(`bench/status_profile.py`, which answers the API calls from memory). What the profile leaves
out is the API server's handling of the status it writes (NVIDIA's shape: one `status.nodes`
entry per node, a list-map, about 125 bytes each) and the delivery of the new version to a
watcher. This measures both against a real API server, with nothing else writing: the
ComputeDomain CRD of this checkout in a sim started with `--no-driver`, one CD per size, and
the same JSON patch the controller sends (`add /status`), each write turning one more entry
Ready so every write changes the object.

Usage::

    cdctl sim up --name sw --racks 1 --nodes-mode virtual --no-driver
    python3 bench/status_write.py --sim ~/.local/state/compute-domains/sims/sw \
        --sizes 1152 2304 4608 --repeats 8

Prints, per size: the status's size, the client's round trip of the write (request sent →
answer decoded), when a separate watch of the CD delivered that version (decoded by lightkube,
as the bench's observer and every ComputeDomain cache do), and the API server's CPU seconds
per write (from ``/proc``), as medians with the range.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import yaml
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.types import PatchType

from compute_domains.api import names
from compute_domains.api.computedomain import ComputeDomainResource, ComputeDomainStatusResource

CRD = Path(__file__).resolve().parents[1] / (
    "deploy/helm/compute-domains/crds/resource.nvidia.com_computedomains.yaml"
)
NS = "default"


def _status(n: int, ready: int) -> dict[str, Any]:
    """A status of ``n`` nodes in cliques of 18, the first ``ready`` of them Ready."""
    nodes = [
        {
            "name": f"gb200-r{i // 18:03d}-n{i % 18:02d}",
            "ipAddress": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",
            "cliqueID": f"c0ffee00-0000-0000-0000-{i // 18:012x}.1",
            "index": i % 18,
            "status": "Ready" if i < ready else "NotReady",
        }
        for i in range(n)
    ]
    done = ready >= n
    return {
        "status": "Ready" if done else "NotReady",
        "nodes": nodes,
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if done else "False",
                "reason": "AllNodesReady" if done else "NodesNotReady",
                "message": f"{min(ready, n)}/{n} nodes ready",
                "lastTransitionTime": "2026-12-07T00:00:00Z",
            }
        ],
    }


def _apiserver_cpu() -> float:
    """CPU seconds of every kube-apiserver process on this machine (utime + stime)."""
    tick = 100.0
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if "(kube-apiserver)" not in text:
            continue
        fields = text.rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


async def _crd(client: AsyncClient) -> None:
    body = yaml.safe_load(CRD.read_text())
    try:
        await client.create(CustomResourceDefinition.from_dict(body))
    except ApiError as err:
        if err.status.code != 409:
            raise
    for _ in range(100):
        crd = await client.get(CustomResourceDefinition, body["metadata"]["name"])
        conds = (crd.status.conditions if crd.status else None) or []
        if any(c.type == "Established" and c.status == "True" for c in conds):
            return
        await asyncio.sleep(0.1)
    raise SystemExit("the ComputeDomain CRD did not become Established")


async def _size(client: AsyncClient, n: int, repeats: int) -> dict[str, Any]:
    name = f"sw-{n}"
    spec = {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-rct"}}}
    cd = ComputeDomainResource.from_dict(
        {
            "apiVersion": names.API_VERSION,
            "kind": names.COMPUTE_DOMAIN_KIND,
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }
    )
    await client.create(cd)
    seen: dict[str, float] = {}
    arrived = asyncio.Event()

    async def follow() -> None:
        async for _op, obj in client.watch(
            ComputeDomainResource, namespace=NS, fields={"metadata.name": name}
        ):
            seen[str(obj.metadata.resourceVersion)] = time.perf_counter()
            arrived.set()

    watcher = asyncio.create_task(follow())
    rows: list[tuple[float, float, float]] = []
    size = 0
    try:
        await asyncio.sleep(0.5)  # the watch is open (its first event is the CD itself)
        for r in range(repeats + 1):  # the first write fills the list: not counted
            status = _status(n, n - repeats + r)
            patch = [{"op": "add", "path": "/status", "value": status}]
            size = len(json.dumps(status, separators=(",", ":")))  # as the wire carries it
            cpu0 = _apiserver_cpu()
            t0 = time.perf_counter()
            updated = await client.patch(
                ComputeDomainStatusResource, name, patch, namespace=NS, patch_type=PatchType.JSON
            )
            t1 = time.perf_counter()
            version = str(updated.metadata.resourceVersion)  # type: ignore[union-attr]
            async with asyncio.timeout(60):
                while version not in seen:
                    arrived.clear()
                    await arrived.wait()
            cpu1 = _apiserver_cpu()
            if r:
                rows.append((t1 - t0, seen[version] - t0, cpu1 - cpu0))
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await client.delete(ComputeDomainResource, name, namespace=NS)
    return {"n": n, "size": size, "rows": rows}


def _span(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}..{max(values):.3f})"


async def _main(sim: Path, sizes: list[int], repeats: int) -> None:
    config = KubeConfig.from_file(sim / "controlplane/kubeconfig/admin.yaml")
    client = AsyncClient(config, timeout=120)
    await _crd(client)
    print("| nodes | status KiB | write round trip s | watch delivered s | API server CPU s |")
    print("|---:|---:|---|---|---|")
    for n in sizes:
        got = await _size(client, n, repeats)
        rows = got["rows"]
        print(
            f"| {n:,} | {got['size'] // 1024} | {_span([r[0] for r in rows])} | "
            f"{_span([r[1] for r in rows])} | {_span([r[2] for r in rows])} |",
            flush=True,
        )


def main() -> None:
    """Parse the command line and measure."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim", type=Path, required=True, help="the sim's folder")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1152, 2304, 4608])
    ap.add_argument("--repeats", type=int, default=8)
    args = ap.parse_args()
    asyncio.run(_main(args.sim, args.sizes, args.repeats))


if __name__ == "__main__":
    main()
