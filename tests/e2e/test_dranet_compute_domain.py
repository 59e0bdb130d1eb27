"""The guide's §15.5 pod shape on the full stack: each pod claims an IMEX channel from our driver
(chart-installed) and four RDMA NICs from DRANET's stand-in through the guide's ``rdma-devices``
DeviceClass (§3.4, applied with ``kubectl apply -f`` from ``examples/guide/``) and shared RDMA
template; one pod per node by anti-affinity, pinned to the rack's cluster UUID. Both drivers
prepare the same pod: the container sees the CD's channel (CDI; ``channel0`` per domain, the
CD's own number per clique) and the four NICs and their RDMA character devices (NRI), and the
ComputeDomain turns Ready over both nodes.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node, Pod

from compute_domains.api import computedomain, names
from compute_domains.sim import state, topology
from tests.e2e import helpers

pytestmark = pytest.mark.timeout(900)
SHAPE = topology.Shape(racks=1, nodes_per_rack=2)
DRANET = True
REPO = Path(__file__).resolve().parents[2]

_PROBE = (
    "ls /dev/nvidia-caps-imex-channels; ls /sys/class/net; ls /dev/infiniband; "
    "echo probed; sleep 3600"
)


def _pod(rank: int, cluster_uuid: str) -> dict[str, Any]:
    """The guide's training pod of §15.5 (its affinities and both claims), one container."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{rank}",
            "namespace": "default",
            "labels": {"job": "training-job-2domain"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "nvidia.com/gpu.clusteruuid",
                                        "operator": "In",
                                        "values": [cluster_uuid],
                                    }
                                ]
                            }
                        ]
                    }
                },
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {
                                "matchExpressions": [
                                    {
                                        "key": "job",
                                        "operator": "In",
                                        "values": ["training-job-2domain"],
                                    }
                                ]
                            },
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                },
            },
            "containers": [
                {
                    "name": "trainer",
                    "image": "ubuntu:22.04",
                    "command": ["sh", "-c", _PROBE],
                    "resources": {
                        "limits": {"nvidia.com/gpu": 4},
                        "claims": [{"name": "compute-domain-channel"}, {"name": "rdma-nics"}],
                    },
                }
            ],
            "resourceClaims": [
                {
                    "name": "compute-domain-channel",
                    "resourceClaimTemplateName": "training-job-imex-channel",
                },
                {"name": "rdma-nics", "resourceClaimTemplateName": "training-job-rdma"},
            ],
        },
    }


async def test_a_pod_gets_its_imex_channel_and_its_rdma_nics(
    admin: AsyncClient, rack_sim: state.SimPaths, tmp_path: Path
) -> None:
    node = await admin.get(Node, "gb200-r0-n00")
    assert node.metadata is not None and node.metadata.labels is not None
    uuid = node.metadata.labels["nvidia.com/gpu.clusteruuid"]
    helpers.kubectl(
        rack_sim, "apply", "-f", str(REPO / "examples/guide/k8s134-rdma-deviceclass.yaml")
    )
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": names.API_VERSION,
            "kind": "ComputeDomain",
            "metadata": {"name": "training-job-cd", "namespace": "default"},
            "spec": {
                "numNodes": 2,
                "channel": {"resourceClaimTemplate": {"name": "training-job-imex-channel"}},
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "training-job-rdma", "namespace": "default"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "rdma-nics",
                                "exactly": {"deviceClassName": "rdma-devices", "count": 4},
                            }
                        ]
                    }
                }
            },
        },
        _pod(0, uuid),
        _pod(1, uuid),
    ]
    manifest = tmp_path / "training.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    helpers.kubectl(rack_sim, "apply", "-f", str(manifest))
    for rank in (0, 1):
        name = f"train-{rank}"
        await helpers.within(
            180, functools.partial(helpers.pod_ready, admin, name), f"{name} Ready"
        )
        channel = await helpers.pod_channel(admin, name, "training-job-cd")
        logs = await helpers.log_with(
            admin,
            name,
            (channel, "gpu0rdma0", "gpu3rdma0", "uverbs0", "uverbs3", "rdma_cm", "probed"),
        )
        assert "eth1" not in logs, logs  # the gVNIC is not an RDMA device: not allocated
    await helpers.within(60, lambda: _cd_ready(admin), "ComputeDomain Ready on both nodes")
    helpers.kubectl(rack_sim, "delete", "-f", str(manifest), "--wait=false")
    for rank in (0, 1):
        name = f"train-{rank}"
        await helpers.within(60, functools.partial(helpers.gone, admin, Pod, name), f"{name} gone")
    await helpers.within(
        60,
        lambda: helpers.gone(admin, computedomain.ComputeDomainResource, "training-job-cd"),
        "ComputeDomain deleted",
    )


async def _cd_ready(admin: AsyncClient) -> bool:
    status = await helpers.cd_status(admin, "training-job-cd")
    return status.get("status") == "Ready" and len(status.get("nodes") or []) == 2
