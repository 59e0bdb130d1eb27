"""The open-files limit of a sim supervisor, raised to what its nodes need.

In virtual mode one process holds every node's sockets: its kubelet's API connections and
server, its plugin's gRPC sockets, API connections, metrics server and probe connections, about
16 a node, which 1,152 nodes took past the usual 20,000 (``Too many open files``, and plugins
that never turned Ready). Real kubelets and plugins are processes of their own machines, each
with its own limit; so the supervisor raises its own (and its children's, the control plane
included, which holds the other end of every API connection) before it starts anything.
"""

from __future__ import annotations

import logging
import resource

logger = logging.getLogger(__name__)

BASE = 4096
"""Open files for a sim without nodes (the control plane's own)."""
PER_NODE = 64
"""Open files per simulated node: four times what a virtual node was seen to hold."""


def wanted(nodes: int) -> int:
    """The open-files limit a sim of ``nodes`` nodes asks for."""
    return BASE + PER_NODE * nodes


def raise_open_files(nodes: int) -> int:
    """Raise this process's ``RLIMIT_NOFILE`` to ``wanted(nodes)`` where it is lower: soft and
    hard when allowed (root), else the soft limit up to the hard one. Returns the soft limit."""
    want = wanted(nodes)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return soft
    try:
        new_hard = hard if hard == resource.RLIM_INFINITY or hard >= want else want
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, new_hard))
        return want
    except (ValueError, OSError):
        fallback = hard if hard != resource.RLIM_INFINITY else want
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, fallback), hard))
        logger.warning(
            "open-files limit %d is below the %d a sim of %d nodes needs; not allowed to raise "
            "the hard limit, so start-up may fail with 'Too many open files'",
            fallback,
            want,
            nodes,
        )
        return min(want, fallback)
