"""What a pod worker of the simulated kubelet uses from its node (owned by the node).

The node (``node.SimNode``) builds one ``NodeServices`` and hands it to each of its pod workers:
its identity and folders, its API client and event recorder, the container runtime and image
table, and the DRA manager's steps as plain callables, so pods and containers never reach back
into the node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from compute_domains.containers import runtime
from compute_domains.sim import images
from compute_domains.sim.kubelet import config, events, nri

CdiResolver = Callable[
    [list[str], dict[str, str], list[runtime.Mount]],
    tuple[dict[str, str], list[runtime.DeviceNode], list[runtime.Mount]],
]
"""The runtime's CDI step: (CDI ids, env, mounts) → the container's env, device nodes, mounts."""


@dataclasses.dataclass(kw_only=True, slots=True)
class NodeServices:
    """What a pod worker uses from its node (owned by the node)."""

    name: str
    ip: str
    root: Path
    client: AsyncClient
    runtime: runtime.Runtime
    recorder: events.EventRecorder
    images: images.ImageRegistry
    settings: config.KubeletSettings
    api_host: str
    api_port: int
    prepare: Callable[[Pod], Awaitable[dict[str, list[tuple[list[str], list[str]]]]]]
    """DRA prepare: pod claim name → [(request names, CDI device ids)]; raises PrepareError."""
    unprepare: Callable[[Pod], Awaitable[None]]
    resolve_cdi: CdiResolver
    release_ip: Callable[[str], None]
    logs_dir: Path
    nri_plugins: Sequence[nri.Plugin] = ()
    """The runtime's NRI plugins (DRANET's stand-in), called in order."""
