"""Did every workload container of a formation get its IMEX channel? Read from its own log.

The formation benchmark times "all workload pods Running" from the pods' Ready condition: a
workload container starts only after the kubelet plugin prepared its claim, and that claim holds
one device, the CD's channel. This module checks afterwards that the container really saw the
channel, whatever the driver: NVIDIA's plugin injects only the channel device node (no
``/imexd``, so the workload cannot ask an IMEX daemon), ours the channel plus the daemon's
config. The common ground is the channel, which the workload stand-in (``mnnvl-workload``)
lists in its first lines: ``IMEX channels: 1: /dev/nvidia-caps-imex-channels/channel0 ...``
or ``IMEX channels: none under ...``.
"""

from __future__ import annotations

import asyncio
import functools
import re

import httpx2 as httpx
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.bench import bounded
from compute_domains.infra import kube

_CHANNELS = re.compile(r"IMEX channels: (none|\d+)\b")


def channel_count(line: str) -> int | None:
    """The channel count a workload log line reports, or None for any other line."""
    m = _CHANNELS.search(line)
    if m is None:
        return None
    return 0 if m.group(1) == "none" else int(m.group(1))


async def _first_count(client: AsyncClient, pod: str, ns: str) -> int | None:
    """The count from the pod's log, following it until the line comes (None: log ended)."""
    async for line in client.log(pod, namespace=ns, follow=True):
        count = channel_count(line)
        if count is not None:
            return count
    return None


_UNREAD = "log not read"
_TRANSPORT_TRIES = 3


async def _one(client: AsyncClient, pod: str, ns: str) -> str | None:
    tries = 0
    while True:
        try:
            count = await _first_count(client, pod, ns)
        except httpx.HTTPError as err:
            if kube.code_of(err):
                return f"pod {pod}: log not readable ({kube.server_message(err)})"
            # No answer at all (at 4,608 virtual nodes the machine ran out of ports for new
            # connections, issue 28): not this pod's fault, and the measured formation must
            # not be lost over it; a few tries, then the log counts as not read.
            tries += 1
            if tries >= _TRANSPORT_TRIES:
                return f"pod {pod}: {_UNREAD} ({type(err).__name__}: {err})"
            await asyncio.sleep(0.5 * tries)
            continue
        if count is not None:
            return None if count > 0 else f"pod {pod}: started without an IMEX channel"
        # The log ended before the line was written (a kubelet that serves a follow request
        # only up to what exists); ask again, bounded by the caller's timeout.
        await asyncio.sleep(0.5)


async def _checked(client: AsyncClient, pod: str, *, ns: str) -> str:
    """``_one``'s verdict, "" for a pod that saw its channel."""
    return await _one(client, pod, ns) or ""


async def problems(
    client: AsyncClient, *, ns: str, name: str, n: int, timeout: float = 60, limit: int = 64
) -> list[str]:
    """One line per workload pod of the run ``name`` that did not see a channel (empty: all
    ``n`` did); the logs are read ``limit`` at a time (``bench.bounded``), all within
    ``timeout`` seconds."""
    listed = client.list(Pod, namespace=ns, labels={"bench": name})
    pods = [str(p.metadata.name) async for p in listed if p.metadata]
    if len(pods) != n:
        return [f"{name}: {len(pods)} workload pods to check, expected {n}"]
    checked = await bounded.gather(
        functools.partial(_checked, client, ns=ns), pods, limit=limit, timeout=timeout
    )
    late = sum(1 for c in checked if c is None)
    if late:
        return [
            f"{name}: {late} of {n} workload logs did not list their channels within {timeout:.0f}s"
        ]
    unread = [c for c in checked if c and f": {_UNREAD} (" in c]
    found = [c for c in checked if c and c not in unread]
    if unread:
        found.append(f"{name}: {len(unread)} of {n} workload logs not read (first: {unread[0]})")
    return found
