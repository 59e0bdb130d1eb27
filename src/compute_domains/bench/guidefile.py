"""The guide's two-domain 64+8 file as the scenario applies it, and the racks it is filled in by.

The seeds' §15.6 file (``MANIFEST``) and §3.4 DeviceClass (``DEVICECLASS``), the names the
scenario finds in them (the ComputeDomain, its channel and RDMA templates, the placeholders'
label), and ``render``: the file's objects with the guide's ClusterUUID placeholders
(``GUIDE_UUIDS``) filled in by rack, plus, with warm spares, our warm-nodes annotation on its
ComputeDomain (``warm=False`` is the file as written, NVIDIA's behaviour). ``racks_of`` reads
the racks (by cluster UUID) and each node's rack from the running sim.

``scenario`` re-exports these names, where their callers have always found them.
"""

from __future__ import annotations

from typing import Any, Final

import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from compute_domains.api import names
from compute_domains.sim import trainer

MANIFEST: Final = "examples/guide/k8s134-2domain-64plus8-computedomain-dranet.yaml"
DEVICECLASS: Final = "examples/guide/k8s134-rdma-deviceclass.yaml"
"""The guide's §3.4 ``rdma-devices`` DeviceClass, which the manifest's RDMA template names."""
GUIDE_UUIDS: Final = (
    "804c7837-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
    "89164aa7-yyyy-yyyy-yyyy-yyyyyyyyyyyy",
)
"""The guide's ClusterUUID placeholders for Domain A and Domain B (§15.5), filled in by rack."""
CD_NAME: Final = "training-job-cd"
CHANNEL_TEMPLATE: Final = "training-job-imex-channel"
RDMA_TEMPLATE: Final = "training-job-rdma"
PLACEHOLDER_LABEL: Final = "app"
PLACEHOLDER_APP: Final = "gpu-placeholder"


def render(text: str, racks: tuple[trainer.Rack, ...], *, warm: bool) -> list[dict[str, Any]]:
    """The manifest's objects with the guide's two ClusterUUID placeholders filled in by the
    first two racks; ``warm=True`` adds the warm-nodes annotation over both racks to the
    ComputeDomain (``warm=False``: the guide's file as written, for NVIDIA's driver).

    Raises:
        ValueError: fewer than two racks, or the text lacks a placeholder (not the guide's file).
    """
    if len(racks) < 2:
        raise ValueError(f"the 2-domain scenario needs two racks, the cluster has {len(racks)}")
    for placeholder, rack in zip(GUIDE_UUIDS, racks, strict=False):
        if placeholder not in text:
            raise ValueError(f"the manifest has no ClusterUUID placeholder {placeholder!r}")
        text = text.replace(placeholder, rack.cluster_uuid)
    docs = [d for d in yaml.safe_load_all(text) if d]
    if warm:
        selector = (
            f"{trainer.CLUSTER_UUID_LABEL} in ({racks[0].cluster_uuid},{racks[1].cluster_uuid})"
        )
        for doc in docs:
            if doc["kind"] == "ComputeDomain":
                meta = doc["metadata"]
                meta.setdefault("annotations", {})[names.WARM_NODES_ANNOTATION] = selector
    return docs


async def racks_of(client: AsyncClient) -> tuple[dict[str, str], tuple[trainer.Rack, ...]]:
    """Node → rack name, and the racks (``a``, ``b``, ... in node-name order) by cluster UUID."""
    nodes = sorted(
        [n async for n in client.list(Node, labels={trainer.CLUSTER_UUID_LABEL: None})],
        key=lambda n: str(n.metadata.name),  # type: ignore[union-attr]
    )
    uuids: list[str] = []
    for n in nodes:
        uuid = (n.metadata.labels or {})[trainer.CLUSTER_UUID_LABEL]  # type: ignore[union-attr]
        if uuid not in uuids:
            uuids.append(uuid)
    racks = tuple(trainer.Rack(chr(ord("a") + i), u) for i, u in enumerate(uuids))
    by_uuid = {r.cluster_uuid: r.name for r in racks}
    node_rack = {
        str(n.metadata.name): by_uuid[(n.metadata.labels or {})[trainer.CLUSTER_UUID_LABEL]]  # type: ignore[union-attr]
        for n in nodes
    }
    return node_rack, racks
