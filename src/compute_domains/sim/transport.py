"""Which peers NCCL reaches over MNNVL and which over the network, as ``mnnvl-workload`` says.

NCCL with ``NCCL_MNNVL_ENABLE=2`` (the guide's §15.5) uses MNNVL for the peers of its IMEX domain
and falls back to the network for the rest: RDMA over the container's RDMA NICs (what DRANET
gives a pod), else sockets. The stand-in knows its IMEX domain's READY nodes, the job's size
(``WORLD_SIZE`` and its MPI spellings, one rank per pod as in the guide) and the NICs in its
``/sys/class/net``; ``paths`` words what follows from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

NET_DIR = Path("/sys/class/net")
SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")


def world_size(env: Mapping[str, str]) -> int | None:
    """The job's rank count from the first of ``SIZE_VARS`` set to a number (None: unknown)."""
    for var in SIZE_VARS:
        value = env.get(var, "")
        if value.isdigit():
            return int(value)
    return None


def rdma_nics(net: Path) -> list[str]:
    """The interfaces under ``net`` (a ``/sys/class/net``) that are RDMA NICs: those with a
    ``device/infiniband/<link>`` entry, as the kernel shows an RDMA-capable netdev."""
    found = []
    for entry in sorted(net.iterdir()) if net.is_dir() else []:
        ib = entry / "device" / "infiniband"
        if ib.is_dir() and any(ib.iterdir()):
            found.append(entry.name)
    return found


def paths(ready: int, world: int | None, nics: Sequence[str], mnnvl: str) -> str:
    """Which peers NCCL reaches over MNNVL (the ``ready`` nodes of its IMEX domain) and which
    it falls back to the network for, one rank per pod; ``mnnvl`` is ``NCCL_MNNVL_ENABLE``."""
    fallback = (
        f"RDMA over {len(nics)} NICs ({', '.join(nics)})"
        if nics
        else "sockets (no RDMA NIC in this container)"
    )
    if mnnvl == "0":
        return f"NCCL_MNNVL_ENABLE=0: no MNNVL; every peer falls back to {fallback}"
    near = ready
    if near == 0:
        return f"no READY IMEX domain: every peer falls back to {fallback}"
    text = f"MNNVL to the {near} READY nodes of this IMEX domain"
    if world is None:
        return f"{text}; peers outside it fall back to {fallback} (WORLD_SIZE unknown)"
    if world <= near:
        return f"{text}; all {world} ranks can be within it"
    return (
        f"{text}; at least {world - near} of {world} ranks are outside it: fall back to {fallback}"
    )
